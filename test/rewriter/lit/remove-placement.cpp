// RUN: cp %s %t.cpp
// RUN: %migrate --only=remove-placement,prepare %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
#include <torch/torch.h>

struct Net : torch::nn::Module {
  Net() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc->forward(x); }
  torch::nn::Linear fc{nullptr};
};

int main() {
  torch::Device device(torch::kCUDA);
  torch::nn::Linear holder(4, 2);
  holder->to(device);
  // CHECK: {{^}}  torch::nn::Linear holder(4, 2);
  // CHECK-NEXT: {{^}}  accelerator.prepare(holder);
  // CHECK-NOT: {{^ *}}holder->to(device);
  auto shared = std::make_shared<Net>();
  shared->to(device, torch::kDouble);
  // CHECK: {{^ *}}shared->to(torch::kDouble);
  Net plain;
  plain.to(torch::kCUDA);
  // CHECK-NOT: {{^ *}}plain.to(torch::kCUDA);
  torch::nn::Linear unprepared(3, 3);
  unprepared->to(device);
  // CHECK: {{^ *}}unprepared->to(device);
  torch::optim::SGD a(holder->parameters(), 0.1), b(shared->parameters(), 0.1);
  torch::optim::SGD c(plain.parameters(), 0.1);
  auto dataset = torch::data::datasets::TensorDataset({torch::ones({8, 4})});
  auto loader = torch::data::make_data_loader(std::move(dataset), 4);
  for (auto &batch : *loader) {
    auto x = batch[0].data.to(device);
    // CHECK: {{^ *}}auto x = batch[0].data;
    auto y = batch[0].data.cuda();
    // CHECK: {{^ *}}auto y = batch[0].data;
    auto z = batch[0].data.to(device, torch::kHalf);
    // CHECK: {{^ *}}auto z = batch[0].data.to(torch::kHalf);
    auto kept = batch[0].data.to(torch::kCPU);
    // CHECK: {{^ *}}auto kept = batch[0].data.to(torch::kCPU);
    auto own = torch::zeros({2}).to(device);
    // CHECK: {{^ *}}auto own = torch::zeros({2}).to(device);
    plain.forward(x).sum().backward();
  }
  // A loader that feeds no model is left as written (every process reads all of it), and so is
  // the placement of what it yields.
  auto index_loader = torch::data::make_data_loader(
      torch::data::datasets::TensorDataset({torch::ones({8, 4})}), 4);
  for (auto &batch : *index_loader) {
    auto kept_placement = batch[0].data.to(device);
    // CHECK: {{^ *}}auto kept_placement = batch[0].data.to(device);
  }
}
// MSG: 'b' is declared in a form accel-migrate does not rewrite
