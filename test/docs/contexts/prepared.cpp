// A program with a prepared model, for a snippet that uses `accelerator` and `model`.
#include <accel/accel.h>
#include <torch/torch.h>

int main() {
  accel::Accelerator accelerator;
  torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 1));
  accelerator.prepare(model);
  // @snippet
  return 0;
}
