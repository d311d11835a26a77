// RUN: cp %s %t.cpp
// RUN: %migrate --only=device %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
#include <torch/torch.h>
#include <cstdio>
#include <string>

void use(torch::Device) {}

int main(int argc, char **argv) {
  // CHECK: {{^ *}}accel::Accelerator accelerator;
  torch::Device a(torch::kCUDA);
  // CHECK: {{^ *}}torch::Device a(accelerator.device());
  torch::Device b(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  // CHECK: {{^ *}}torch::Device b(accelerator.device());
  torch::Device c = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  // CHECK: {{^ *}}torch::Device c = accelerator.device();
  torch::DeviceType device_type;
  if (torch::cuda::is_available())
    device_type = torch::kCUDA;
  else
    device_type = torch::kCPU;
  torch::Device d(device_type);
  // CHECK: {{^ *}}torch::Device d(accelerator.device());
  use(torch::Device(torch::kCUDA, 0));
  // CHECK: {{^ *}}use(accelerator.device());
  a = torch::Device(torch::kCUDA, 1);
  // CHECK: {{^ *}}a = accelerator.device();
  torch::Device e("cuda:0");
  // CHECK: {{^ *}}torch::Device e(accelerator.device());
  // A device constructed inside the initializer is part of the one replacement, not a conflict.
  torch::Device f = torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0)
                                                : torch::Device(torch::kCPU);
  // CHECK: {{^ *}}torch::Device f = accelerator.device();
  // CHECK-NOT: {{^ *}}: torch::Device(torch::kCPU);

  // The tutorials' idiom: one definition from the accelerator, and the if goes with it.
  torch::Device g(torch::kCPU);
  if (torch::cuda::is_available()) {
    g = torch::Device(torch::kCUDA);
  }
  // CHECK: {{^ *}}torch::Device g(accelerator.device());
  // CHECK-NOT: {{^ *}}g = 
  // An if that does more keeps the rest.
  torch::Device h = torch::kCPU;
  if (torch::cuda::is_available()) {
    std::puts("CUDA is available! Training on GPU.");
    h = torch::kCUDA;
  }
  // CHECK: {{^ *}}torch::Device h = accelerator.device();
  // CHECK-NEXT: {{^ *}}if (torch::cuda::is_available()) {
  // CHECK-NEXT: {{^ *}}std::puts("CUDA is available! Training on GPU.");
  // CHECK-NEXT: {{^ *}}}
  use(g);
  use(h);

  // Negative: explicit CPU devices and copies stay.
  torch::Device cpu(torch::kCPU);
  // CHECK: {{^ *}}torch::Device cpu(torch::kCPU);
  torch::Device copy = a;
  // CHECK: {{^ *}}torch::Device copy = a;
  use(torch::Device(torch::kCPU));
  // CHECK: {{^ *}}use(torch::Device(torch::kCPU));

  // Chosen by the user: reported, not rewritten.
  torch::Device chosen(std::string(argc > 1 ? argv[1] : "cpu"));
  // MSG-NOT: differently
  // MSG: {{.*}}.tmp.cpp:[[@LINE-2]]:24: warning: the device is chosen from user input and is left as it is; {{.*}} [accel-migrate-device]
  // CHECK: {{^ *}}torch::Device chosen(std::string(argc > 1 ? argv[1] : "cpu"));
}
