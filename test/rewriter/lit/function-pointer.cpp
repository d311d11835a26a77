// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
//
// main calls train() through a function pointer, a call that could not be given an extra
// argument: train() binds the process's Accelerator instead, keeping its signature, and main
// creates that Accelerator though main itself uses none.
#include <torch/torch.h>

struct Points : torch::data::datasets::Dataset<Points> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({2}, static_cast<double>(i)), torch::ones({1})};
  }
  torch::optional<size_t> size() const override { return 8; }
};

void train(torch::nn::Linear &model) {
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 4);
  for (auto &batch : *loader) {
    optimizer.zero_grad();
    torch::mse_loss(model->forward(batch.data), batch.target).backward();
    optimizer.step();
  }
}
// CHECK: {{^}}void train(torch::nn::Linear &model) {
// CHECK-NEXT: {{^}}  accel::Accelerator &accelerator = accel::Accelerator::current();
// CHECK-NEXT: {{^}}  accelerator.prepare(model);
// CHECK-NEXT: {{^}}  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));

// CHECK: {{^}}int main() {
// CHECK-NEXT: {{^}}  accel::Accelerator accelerator;
// CHECK-NEXT: {{^}}  torch::nn::Linear model(2, 1);
int main() {
  torch::nn::Linear model(2, 1);
  void (*step)(torch::nn::Linear &) = train;
  step(model);
}
// CHECK: {{^}}  void (*step)(torch::nn::Linear &) = train;
// CHECK-NEXT: {{^}}  step(model);
// MSG: 0 warnings
