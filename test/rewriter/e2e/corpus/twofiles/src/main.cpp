#include "net.h"

#include <cstdio>

int main() {
    torch::manual_seed(0);
    auto centers = torch::randn({3, 10}) * 1.5;
    auto labels = torch::randint(0, 3, {512});
    auto inputs = centers.index_select(0, labels) + torch::randn({512, 10});

    Net model(3);
    double best = 0;
    for (int epoch = 1; epoch <= 3; ++epoch) {
        train(model, inputs, labels, 0.05);
        double acc = accuracy(model, inputs, labels);
        std::printf("epoch %d: accuracy %.4f\n", epoch, acc);
        if (acc > best) {
            best = acc;
            torch::save(model, "best.pt");
        }
    }
    std::printf("best accuracy %.4f\n", best);
    print_weights(model);
}
