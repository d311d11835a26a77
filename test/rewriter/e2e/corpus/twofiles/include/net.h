#pragma once
#include <torch/torch.h>

#include <string>

struct NetImpl : torch::nn::Module {
    explicit NetImpl(int64_t classes)
        : fc1(register_module("fc1", torch::nn::Linear(10, 32))),
          fc2(register_module("fc2", torch::nn::Linear(32, classes))) {}
    torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
    torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

// Three Gaussian blobs in 10 dimensions; every process builds the same set.
struct Blobs : torch::data::datasets::Dataset<Blobs> {
    Blobs(torch::Tensor inputs, torch::Tensor labels) : inputs(inputs), labels(labels) {}
    torch::data::Example<> get(size_t i) override { return {inputs[i], labels[i]}; }
    torch::optional<size_t> size() const override { return labels.size(0); }
    torch::Tensor inputs, labels;
};

void train(Net &model, torch::Tensor inputs, torch::Tensor labels, double lr);
double accuracy(Net &model, torch::Tensor inputs, torch::Tensor labels);
// One line of every weight's sum, on standard error, so that a test can compare processes.
void print_weights(Net &model);
