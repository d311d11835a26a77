// RUN: cp %s %t.cpp
// RUN: %migrate --only=backward %t.cpp
// RUN: FileCheck %s --input-file=%t.cpp --match-full-lines --strict-whitespace
// RUN: not grep -nE '[[:space:]]+$' %t.cpp
// The accelerator, inserted first in a parameter or argument list, follows the list's layout:
// on a line of its own where the items stand one per line, never with a trailing space.
#include <torch/torch.h>

// CHECK-LABEL:void one_per_line(
// CHECK-NEXT:    accel::Accelerator{{ ?& ?}}accelerator,
// CHECK-NEXT:    torch::Tensor loss,
// CHECK-NEXT:    int repeats) {
void one_per_line(
    torch::Tensor loss,
    int repeats) {
  for (int i = 0; i < repeats; ++i)
    loss.backward({}, /*retain_graph=*/true);
}

// CHECK-LABEL:void aligned(accel::Accelerator{{ ?& ?}}accelerator,
// CHECK-NEXT:             torch::Tensor loss,
// CHECK-NEXT:             int repeats) {
void aligned(torch::Tensor loss,
             int repeats) {
  for (int i = 0; i < repeats; ++i)
    loss.backward({}, /*retain_graph=*/true);
}

// CHECK-LABEL:void packed(accel::Accelerator{{ ?& ?}}accelerator, torch::Tensor loss, int repeats) {
void packed(torch::Tensor loss, int repeats) {
  for (int i = 0; i < repeats; ++i)
    loss.backward({}, /*retain_graph=*/true);
}

int main() {
  auto loss = torch::ones({1}, torch::requires_grad()).sum();
  // CHECK-LABEL:  one_per_line(
  // CHECK-NEXT:      accelerator,
  // CHECK-NEXT:      loss,
  // CHECK-NEXT:      2);
  one_per_line(
      loss,
      2);
  // CHECK-LABEL:  aligned(accelerator,
  // CHECK-NEXT:          loss,
  // CHECK-NEXT:          2);
  aligned(loss,
          2);
  // CHECK-LABEL:  packed(accelerator, loss, 2);
  packed(loss, 2);
}
