// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
//
// An author's trailing `// comment` stays on the statement it follows: code inserted after a
// brace or a statement goes below the comment, and a removed statement takes its comment along.
#include <torch/torch.h>

int main() { // entry point
  torch::Device device(torch::kCUDA); // the GPU
  torch::nn::Linear model(2, 1); // the model
  model->to(device); // moved to the GPU
  torch::optim::SGD optimizer(model->parameters(), 0.1); // plain SGD
  auto loader = torch::data::make_data_loader(torch::data::datasets::MNIST("unused").map(torch::data::transforms::Stack<>()), 4);
  for (auto &batch : *loader) { // each batch
    optimizer.zero_grad();
    torch::nll_loss(model->forward(batch.data), batch.target).backward(); // back
    optimizer.step();
  }
}
// CHECK: {{^}}int main() { // entry point
// CHECK-NEXT: {{^ *}}accel::Accelerator accelerator;
// CHECK-NEXT: {{^ *}}torch::Device device(accelerator.device()); // the GPU
// CHECK-NEXT: {{^ *}}torch::nn::Linear model(2, 1); // the model
// CHECK-NEXT: {{^ *}}accelerator.prepare(model);
// CHECK-NOT: moved to the GPU
// CHECK: {{^ *}}auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1)); // plain SGD
// CHECK: {{^ *}}for (auto &batch : *loader) { // each batch
// CHECK-NEXT: {{^ *}}auto step = accelerator.accumulate(model);
// CHECK-NEXT: {{^ *}}optimizer.zero_grad();
// CHECK-NEXT: {{^ *}}accelerator.backward(torch::nll_loss(model->forward(batch.data), batch.target)); // back
