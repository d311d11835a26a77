// A project header that cannot be found: no preamble, and the same error either way.
#include "not_in_this_project.h"
#include <torch/torch.h>
#include <cstdio>

int main() {
  torch::nn::Linear model(2, 2);
  model->to(torch::kCUDA);
  std::printf("%d\n", static_cast<int>(model->parameters().size()));
}
