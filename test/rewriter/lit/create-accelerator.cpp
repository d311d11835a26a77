// RUN: cp %s %t.cpp
// RUN: %migrate --only=backward --mixed-precision=bf16 --gradient-accumulation-steps=4 %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// The host (main) creates the Accelerator with the options given; every other function that
// uses it binds the process's at the top of its body, and no signature, call or capture changes.
#include <torch/torch.h>

void step(torch::Tensor loss);
// CHECK: {{^}}void step(torch::Tensor loss);

void step(torch::Tensor loss) { loss.backward(); }
// CHECK: {{^}}void step(torch::Tensor loss) {
// CHECK-NEXT: {{^}}  accel::Accelerator {{&|& }}accelerator = accel::Accelerator::current();
// CHECK-NEXT: {{^}}  accelerator.backward(loss);
// CHECK-NEXT: {{^}}}

void epoch(int n) {
  for (int i = 0; i < n; ++i)
    step(torch::ones({1}, torch::requires_grad()).sum());
}
// CHECK: {{^}}void epoch(int n) {
// CHECK-NEXT: {{^}}  for (int i = 0; i < n; ++i)
// CHECK-NEXT: {{^}}    step(torch::ones({1}, torch::requires_grad()).sum());
// CHECK-NEXT: {{^}}}

// CHECK: {{^}}void lambdas() {
// CHECK-NEXT: {{^}}  auto by_copy = [=](torch::Tensor loss) {
// CHECK-NEXT: {{^}}    accel::Accelerator {{&|& }}accelerator = accel::Accelerator::current();
// CHECK-NEXT: {{^}}    accelerator.backward(loss);
// CHECK-NEXT: {{^}}  };
void lambdas() {
  auto by_copy = [=](torch::Tensor loss) { loss.backward(); };
  by_copy(torch::ones({1}));
  // A callback handed over by pointer keeps its signature: its callers are not edited.
  void (*callback)(torch::Tensor) = step;
  callback(torch::ones({1}));
  // CHECK: {{^}}  callback(torch::ones({1}));
}

// CHECK: {{^}}int main() {
// CHECK-NEXT: {{^}}  accel::Accelerator accelerator(accel::AcceleratorOptions().mixed_precision("bf16").gradient_accumulation_steps(4));
int main() {
  epoch(2);
  // CHECK: {{^ *}}epoch(2);
  auto by_ref = [&](torch::Tensor loss) { loss.backward(); };
  // CHECK: {{^ *}}auto by_ref = [&](torch::Tensor loss) { accelerator.backward(loss); };
  by_ref(torch::ones({1}));
  lambdas();
}
// MSG: 0 warnings
// MSG-NOT: warning
