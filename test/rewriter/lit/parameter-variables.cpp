// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
//
// An optimizer that gets its model's parameters through a variable (as public programs build
// theirs: the parameters taken first, a vector filtered by requires_grad, weight decay on some
// parameters only through param groups, a factory given the vector) is connected to that model,
// which is prepared; none of them is left to train unaveraged with only a warning.
#include <torch/torch.h>

torch::optim::Adam make_adam(const std::vector<torch::Tensor>& parameters) {
  return torch::optim::Adam(parameters, torch::optim::AdamOptions(1e-3));
}

void step(torch::optim::Optimizer& optimizer, torch::nn::Module& model) {
  optimizer.zero_grad();
  auto loss = model.parameters()[0].sum();
  loss.backward();
  optimizer.step();
}

int main() {
  torch::nn::Linear first(4, 2);
  auto parameters = first->parameters();
  torch::optim::Adam adam = make_adam(parameters);
  // CHECK: torch::nn::Linear first(4, 2);
  // CHECK-NEXT: accelerator.prepare(first);
  // CHECK: auto adam = accelerator.prepare(make_adam(parameters));

  torch::nn::Linear second(4, 2);
  std::vector<torch::Tensor> trainable;
  for (auto& p : second->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  torch::optim::AdamW adamw(trainable, torch::optim::AdamWOptions(1e-3));
  // CHECK: torch::nn::Linear second(4, 2);
  // CHECK-NEXT: accelerator.prepare(second);
  // CHECK: auto adamw = accelerator.prepare(
  // CHECK-SAME: torch::optim::AdamW(trainable, torch::optim::AdamWOptions(1e-3)));

  torch::nn::Linear third(4, 2);
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& item : third->named_parameters())
    (item.key().find("bias") == std::string::npos ? decay : no_decay).push_back(item.value());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(1e-3));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(1e-3));
  torch::optim::AdamW grouped(groups, torch::optim::AdamWOptions(1e-3));
  // CHECK: torch::nn::Linear third(4, 2);
  // CHECK-NEXT: accelerator.prepare(third);
  // CHECK: auto grouped = accelerator.prepare(
  // CHECK-SAME: torch::optim::AdamW(groups, torch::optim::AdamWOptions(1e-3)));

  for (int i = 0; i < 3; ++i) {
    step(adam, *first);
    step(adamw, *second);
    step(grouped, *third);
  }
}
// MSG-NOT: do not come from a model variable
