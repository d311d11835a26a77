#pragma once

// What the C++ programs of bench/vs_accelerate share with job.py: the model.

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

namespace accel_vs {

/// `depth` hidden layers of width x width with ReLU, then one output: the module names
/// ("0.weight", "2.weight", ...) of job.py's build_mlp, so the same safetensors keys.
inline torch::nn::Sequential build_mlp(int64_t width, int64_t depth) {
  torch::nn::Sequential model;
  for (int64_t i = 0; i < depth; ++i) {
    model->push_back(torch::nn::Linear(width, width));
    model->push_back(torch::nn::ReLU());
  }
  model->push_back(torch::nn::Linear(width, 1));
  return model;
}

}  // namespace accel_vs
