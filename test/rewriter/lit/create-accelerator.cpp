// RUN: cp %s %t.cpp
// RUN: %migrate --only=backward --mixed-precision=bf16 --gradient-accumulation-steps=4 %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
#include <torch/torch.h>

void step(torch::Tensor loss);
// CHECK: {{^}}void step(accel::Accelerator {{&|& }}accelerator, torch::Tensor loss);

void step(torch::Tensor loss) { loss.backward(); }
// CHECK: {{^}}void step(accel::Accelerator {{&|& }}accelerator, torch::Tensor loss) { accelerator.backward(loss); }

void epoch(int n) {
  // CHECK: {{^}}void epoch(accel::Accelerator {{&|& }}accelerator, int n) {
  for (int i = 0; i < n; ++i)
    step(torch::ones({1}, torch::requires_grad()).sum());
  // CHECK: {{^ *}}step(accelerator, torch::ones({1}, torch::requires_grad()).sum());
}

void lambdas() {
  auto by_copy = [=](torch::Tensor loss) { loss.backward(); };
  // MSG: {{.*}}.tmp.cpp:[[@LINE-1]]:44: warning: this lambda does not capture by reference{{.*}}[accel-migrate-backward]
  by_copy(torch::ones({1}));
}

int main() {
  // CHECK: {{^}}int main() {
  // CHECK-NEXT: {{^}}  accel::Accelerator accelerator(accel::AcceleratorOptions().mixed_precision("bf16").gradient_accumulation_steps(4));
  epoch(2);
  // CHECK: {{^ *}}epoch(accelerator, 2);
  auto by_ref = [&](torch::Tensor loss) { loss.backward(); };
  // CHECK: {{^ *}}auto by_ref = [&](torch::Tensor loss) { accelerator.backward(loss); };
  by_ref(torch::ones({1}));
  lambdas();
}
