// RUN: cp %s %t.cpp
// RUN: %migrate --only=cuda-api %t.cpp 2>&1 | FileCheck %s
// RUN: %migrate --only=cuda-api --annotate %t.cpp
// RUN: FileCheck %s --check-prefix=ANNOTATED --input-file=%t.cpp
// RUN: %migrate --only=cuda-api --annotate %t.cpp
// RUN: FileCheck %s --check-prefix=ANNOTATED --input-file=%t.cpp
// RUN: grep -c '^  // accel-migrate: torch::cuda::manual_seed' %t.cpp | FileCheck %s --check-prefix=ONCE
// ONCE: {{^}}1{{$}}
#include <torch/torch.h>
extern "C" int cudaMalloc(void **ptr, unsigned long size);

int main() {
  torch::cuda::manual_seed(3);
  // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:3: warning: torch::cuda::manual_seed is left as it is; {{.*}} [accel-migrate-cuda-api]
  // ANNOTATED: {{^}}  // accel-migrate: torch::cuda::manual_seed is left as it is;
  // ANNOTATED-NEXT: {{^}}  torch::cuda::manual_seed(3);
  void *p = nullptr;
  cudaMalloc(&p, 16);
  // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:3: warning: raw CUDA runtime call 'cudaMalloc' is left as it is{{.*}}[accel-migrate-cuda-api]
}
