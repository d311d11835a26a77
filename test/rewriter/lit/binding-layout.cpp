// RUN: cp %s %t.cpp
// RUN: %migrate --only=backward %t.cpp
// RUN: FileCheck %s --input-file=%t.cpp --match-full-lines --strict-whitespace
// RUN: not grep -nE '[[:space:]]+$' %t.cpp
// A function that uses the accelerator keeps its parameter list as laid out; the binding of the
// process's Accelerator goes first in its body, indented as the body is, after a
// comment that ends the opening line, and a body on one line is opened onto lines of its own.
#include <torch/torch.h>

// CHECK-LABEL:void one_per_line(
// CHECK-NEXT:    torch::Tensor loss,
// CHECK-NEXT:    int repeats) {
// CHECK-NEXT:  accel::Accelerator &accelerator = accel::Accelerator::current();
// CHECK-NEXT:  for (int i = 0; i < repeats; ++i)
void one_per_line(
    torch::Tensor loss,
    int repeats) {
  for (int i = 0; i < repeats; ++i)
    loss.backward({}, /*retain_graph=*/true);
}

// CHECK-LABEL:void commented(torch::Tensor loss) { // keeps its place
// CHECK-NEXT:  accel::Accelerator &accelerator = accel::Accelerator::current();
// CHECK-NEXT:  accelerator.backward(loss);
void commented(torch::Tensor loss) { // keeps its place
  loss.backward();
}

// CHECK-LABEL:void one_line(torch::Tensor loss) {
// CHECK-NEXT:  accel::Accelerator &accelerator = accel::Accelerator::current();
// CHECK-NEXT:  accelerator.backward(loss);
// CHECK-NEXT:}
void one_line(torch::Tensor loss) { loss.backward(); }

struct Holder {
  // CHECK-LABEL:  void method(torch::Tensor loss) {
  // CHECK-NEXT:    accel::Accelerator &accelerator = accel::Accelerator::current();
  // CHECK-NEXT:    accelerator.backward(loss);
  // CHECK-NEXT:  }
  void method(torch::Tensor loss) { loss.backward(); }
};

int main() {
  auto loss = torch::ones({1}, torch::requires_grad()).sum();
  // CHECK-LABEL:  one_per_line(
  // CHECK-NEXT:      loss,
  // CHECK-NEXT:      2);
  one_per_line(
      loss,
      2);
  commented(loss);
  one_line(loss);
  Holder().method(loss);
}
