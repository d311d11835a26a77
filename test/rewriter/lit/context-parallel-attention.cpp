// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
// RUN: grep -v 'PARALLELISM' %s > %t.plain.cpp
// RUN: %migrate %t.plain.cpp
// RUN: FileCheck %s --check-prefix=PLAIN --input-file=%t.plain.cpp
//
// A program that gives its Accelerator a device mesh attends through accel's
// scaled_dot_product_attention (ring attention inside a context-parallel scope, LibTorch's
// outside one); the same program without a mesh keeps LibTorch's call.
#include <accel/accel.h>
#include <torch/torch.h>

struct AttentionImpl : torch::nn::Module {
  AttentionImpl() { qkv = register_module("qkv", torch::nn::Linear(16, 48)); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto parts = qkv(x).view({x.size(0), x.size(1), 3, 4, 4}).permute({2, 0, 3, 1, 4});
    return torch::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, true)
        .transpose(1, 2)
        .reshape({x.size(0), x.size(1), 16});
    // CHECK: {{^}}    return accel::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, true)
    // PLAIN: {{^}}    return torch::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, true)
  }
  torch::nn::Linear qkv{nullptr};
};
TORCH_MODULE(Attention);

int main() {
  accel::AcceleratorOptions options;
  options.parallelism_config(accel::ParallelismConfig().cp_size(1));  // PARALLELISM
  accel::Accelerator accelerator(options);
  Attention attention;
  std::printf("%f\n", attention(torch::randn({2, 8, 16})).sum().item<double>());
}
