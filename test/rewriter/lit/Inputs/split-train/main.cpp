#include "train.h"

#include <cstdio>

int main() {
    torch::manual_seed(0);
    ConvNet model(3);
    auto inputs = torch::randn({64, 8});
    auto targets = inputs.sum(1).gt(0).to(torch::kLong);
    train(model, inputs, targets, 2);
    std::printf("accuracy %.4f\n", evaluate(model, inputs, targets));
}
