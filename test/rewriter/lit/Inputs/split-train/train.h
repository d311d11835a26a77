#pragma once
#include "model.h"

struct Points : torch::data::datasets::Dataset<Points> {
    Points(torch::Tensor x, torch::Tensor y) : x(x), y(y) {}
    torch::data::Example<> get(size_t i) override { return {x[i], y[i]}; }
    torch::optional<size_t> size() const override { return x.size(0); }
    torch::Tensor x, y;
};

void train(ConvNet &model, torch::Tensor inputs, torch::Tensor targets, int epochs);
double evaluate(ConvNet &model, torch::Tensor inputs, torch::Tensor targets);
