// RUN: cp %s %t.cpp
// RUN: %migrate --only=backward %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// Patterns start with {{^ *}} so that they never match these comment lines themselves.
#include <torch/torch.h>
// CHECK: {{^}}#include <torch/torch.h>
// CHECK-NEXT: {{^}}#include <accel/accel.h>

struct Square : torch::autograd::Function<Square> {
  // MSG: {{.*}}.tmp.cpp:[[@LINE-1]]:8: warning: custom autograd function 'Square' is left as written; {{.*}} [accel-migrate-backward]
  static torch::Tensor forward(torch::autograd::AutogradContext *ctx, torch::Tensor x) {
    ctx->save_for_backward({x});
    return x * x;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext *ctx,
                                               torch::autograd::tensor_list grad) {
    return {2 * ctx->get_saved_variables()[0] * grad[0]};
  }
};

int main() {
  // CHECK: {{^}}int main() {
  // CHECK-NEXT: {{^ *}}accel::Accelerator accelerator;
  auto w = torch::ones({2}, torch::requires_grad());
  auto loss = (w * 3).sum();
  loss.backward();
  // CHECK: {{^ *}}accelerator.backward(loss);
  (w * 2).sum().backward({}, /*retain_graph=*/true);
  // CHECK: {{^ *}}accelerator.backward((w * 2).sum(), {}, /*retain_graph=*/true);
  (loss / 4).backward();
  // CHECK: {{^ *}}accelerator.backward(loss / 4);
  auto other = w.sum();
  other.backward(torch::ones({}), true, false, torch::TensorList(w));
  // MSG: {{.*}}.tmp.cpp:[[@LINE-1]]:3: warning: backward() with 'inputs' is left as it is{{.*}}[accel-migrate-backward]
  // CHECK: {{^ *}}other.backward(torch::ones({}), true, false, torch::TensorList(w));
}
// MSG: {{.*}}.tmp.cpp: 5 changes (add-include 1, backward 3, create-accelerator 1), 2 warnings
