#include "train.h"

#include <cstdio>

// Trains the model it is given; the optimizer is its own.
void train(ConvNet &model, torch::Tensor inputs, torch::Tensor targets, int epochs) {
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    auto dataset = Points(inputs, targets).map(torch::data::transforms::Stack<>());
    auto loader = torch::data::make_data_loader(std::move(dataset), 16);
    for (int epoch = 0; epoch < epochs; ++epoch) {
        for (auto &batch : *loader) {
            optimizer.zero_grad();
            auto loss = torch::cross_entropy_loss(model->forward(batch.data), batch.target);
            loss.backward();
            optimizer.step();
        }
    }
}

double evaluate(ConvNet &model, torch::Tensor inputs, torch::Tensor targets) {
    torch::NoGradGuard no_grad;
    return model->forward(inputs).argmax(1).eq(targets).to(torch::kDouble).mean().item<double>();
}
