#pragma once
#include <torch/torch.h>

struct ConvNetImpl : torch::nn::Module {
    ConvNetImpl(int64_t classes) : fc1(register_module("fc1", torch::nn::Linear(8, 16))),
                                   fc2(register_module("fc2", torch::nn::Linear(16, classes))) {}
    torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
    torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(ConvNet);
