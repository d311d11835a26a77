// RUN: cp %s %t.cpp
// The standard after `--` is the user's: this C++20 program (a concept, a requires-clause) parses
// and migrates with it, and accel-migrate adds none of its own.
// RUN: %migrate %t.cpp -- -std=c++20 %torch_includes 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// Without it, the program does not parse as C++17, and nothing is written.
// RUN: cp %s %t.17.cpp
// RUN: not %migrate %t.17.cpp -- -std=c++17 %torch_includes 2>&1 | FileCheck %s --check-prefix=OLD
// RUN: diff %s %t.17.cpp
// The flags after `--` may leave out LibTorch's includes: they are filled in, the standard kept.
// RUN: cp %s %t.bare.cpp
// RUN: %migrate %t.bare.cpp -- -std=c++20 2>&1 | FileCheck %s --check-prefix=MSG
#include <torch/torch.h>

#include <concepts>

template <typename T>
concept Trainable = requires(T model) { model->parameters(); };

template <Trainable Model>
void train(Model &model, torch::Tensor x, torch::Tensor y) {
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimizer.step();
  }
}

int main() {
  torch::nn::Linear model(4, 1);
  auto x = torch::randn({8, 4});
  auto y = torch::randn({8, 1});
  train(model, x, y);
}
// MSG-NOT: error
// MSG: user-standard.cpp.tmp{{.*}}.cpp: {{[0-9]+}} changes
// OLD: error: unknown type name 'concept'
// CHECK: {{^}}void train(Model &model, torch::Tensor x, torch::Tensor y) {
// CHECK-NEXT: {{^}}  accel::Accelerator &accelerator = accel::Accelerator::current();
// CHECK: accelerator.backward(torch::mse_loss(model->forward(x), y));
