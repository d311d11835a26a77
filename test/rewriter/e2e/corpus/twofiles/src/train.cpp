// Training and evaluation live apart from main; train() builds its own optimizer and loader
// from what main gives it, as a multi-file tutorial program does.
#include "net.h"

#include <cstdio>
#include <sstream>

void train(Net &model, torch::Tensor inputs, torch::Tensor labels, double lr) {
    torch::optim::SGD optimizer(model->parameters(), lr);
    auto dataset = Blobs(inputs, labels).map(torch::data::transforms::Stack<>());
    auto loader = torch::data::make_data_loader(std::move(dataset), 32);
    model->train();
    for (auto &batch : *loader) {
        optimizer.zero_grad();
        auto loss = torch::cross_entropy_loss(model->forward(batch.data), batch.target);
        loss.backward();
        optimizer.step();
    }
}

double accuracy(Net &model, torch::Tensor inputs, torch::Tensor labels) {
    torch::NoGradGuard no_grad;
    model->eval();
    return model->forward(inputs).argmax(1).eq(labels).to(torch::kDouble).mean().item<double>();
}

void print_weights(Net &model) {
    std::ostringstream line;
    line.precision(9);
    line << "weights:";
    for (const auto &p : model->parameters())
        line << " " << p.sum().item<double>() << " " << p.square().sum().item<double>();
    std::fprintf(stderr, "%s\n", line.str().c_str());  // one write: processes' lines stay whole
}
