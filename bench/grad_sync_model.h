#pragma once

// The model accel_bench_grad_sync trains, and accel_bench_flight_recorder with it (so that the
// recorder's cost is a share of the same step): `layers` Linear(width, width) + ReLU pairs.

#include <torch/torch.h>

namespace accel_bench {

inline torch::nn::Sequential grad_sync_model(int width, int layers) {
  torch::manual_seed(0);
  torch::nn::Sequential model;
  for (int i = 0; i < layers; ++i) {
    model->push_back(torch::nn::Linear(width, width));
    model->push_back(torch::nn::ReLU());
  }
  return model;
}

}  // namespace accel_bench
