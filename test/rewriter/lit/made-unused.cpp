// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
// What the migration leaves unused is removed, or loses its name, or is named in a warning;
// nothing is left behind for -Wall -Wextra to find.
#include <torch/torch.h>
#include <cstdio>

struct Net : torch::nn::Module {
  Net() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc->forward(x); }
  torch::nn::Linear fc{nullptr};
};

// A parameter read only by the placement that goes keeps its place (callers pass it) and loses
// its name.
// CHECK: {{^}}void train(Net &model, torch::Device /*device*/, Loader &loader, torch::optim::SGD &optimizer) {
// CHECK-NEXT: {{^}}  accel::Accelerator &accelerator = accel::Accelerator::current();
template <typename Loader>
void train(Net &model, torch::Device device, Loader &loader, torch::optim::SGD &optimizer) {
  for (auto &batch : loader) {
    auto x = batch.data.to(device);
    optimizer.zero_grad();
    model.forward(x).sum().backward();
    optimizer.step();
  }
}

// A parameter still read keeps its name.
// CHECK: {{^}}void report(torch::Device device) { std::printf("%d\n", int(device.type())); }
void report(torch::Device device) { std::printf("%d\n", int(device.type())); }

int main() {
  // A local set and read only to build the device is removed with its assignments.
  // CHECK-NOT: {{^}}  torch::DeviceType device_type;
  // CHECK-NOT: {{^ *}}device_type = torch::
  torch::DeviceType device_type;
  if (torch::cuda::is_available()) {
    std::puts("CUDA");
    device_type = torch::kCUDA;
  } else {
    device_type = torch::kCPU;
  }
  // CHECK: {{^}}  if (torch::cuda::is_available()) {
  // CHECK-NEXT: {{^}}    accelerator.puts("CUDA");
  // CHECK-NEXT: {{^}}  } else {
  // CHECK-NEXT: {{^}}  }
  torch::Device device(device_type);
  // CHECK: {{^}}  torch::Device device(accelerator.device());

  // An assignment that is the whole branch of an if cannot go alone: the variable is named, and
  // marked so that the compiler does not warn it is set but not used.
  torch::DeviceType other_type = torch::kCPU;
  if (torch::cuda::is_available())
    other_type = torch::kCUDA;
  torch::Device other(other_type);
  // MSG: {{.*}}.tmp.cpp:[[@LINE-4]]:21: warning: 'other_type' is no longer used after the migration (marked {{\[\[}}maybe_unused{{\]\]}}); remove it if nothing else needs it [accel-migrate-made-unused]
  // CHECK: {{^}}  {{\[\[}}maybe_unused{{\]\]}} torch::DeviceType other_type = torch::kCPU;

  Net model;
  model.to(device);
  torch::optim::SGD optimizer(model.parameters(), 0.1);
  auto dataset = torch::data::datasets::MNIST("unused").map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader(std::move(dataset), 4);
  train(model, device, *loader, optimizer);
  report(other);
}
