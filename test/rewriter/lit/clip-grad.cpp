// RUN: cp %s %t.cpp
// RUN: %migrate --only=clip-grad %t.cpp
// RUN: FileCheck %s --input-file=%t.cpp
#include <torch/torch.h>
using namespace torch::nn::utils;

int main() {
  torch::nn::Linear model(4, 1);
  torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
  // CHECK: {{^ *}}accelerator.clip_grad_norm_(model->parameters(), 1.0);
  double norm = torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0, 2.0);
  // CHECK: {{^ *}}double norm = accelerator.clip_grad_norm_(model->parameters(), 1.0, 2.0);
  clip_grad_value_(model->parameters(), 0.5);
  // CHECK: {{^ *}}accelerator.clip_grad_value_(model->parameters(), 0.5);
  clip_grad_norm_(model->weight, 1.0);
  // CHECK: {{^ *}}accelerator.clip_grad_norm_({model->weight}, 1.0);
  (void)norm;
}
