// RUN: cp %s %t.cpp
// RUN: %migrate --only=backward %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
#include <torch/torch.h>
#define STEP(loss) (loss).backward()

int main() {
  auto w = torch::ones({2}, torch::requires_grad());
  STEP(w.sum());
  // MSG: {{.*}}.tmp.cpp:[[@LINE-1]]:3: warning: code inside macro 'STEP' is left as it is; expand the macro and migrate this line by hand [accel-migrate-backward]
  // CHECK: {{^}}  STEP(w.sum());
  w.sum().backward();
  // CHECK: {{^}}  accelerator.backward(w.sum());
}
