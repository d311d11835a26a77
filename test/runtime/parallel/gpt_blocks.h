#pragma once

// The transformer blocks of the parallelism tests' GPTs (parallelism_test.cpp's, a module with
// named parts; pipeline_test.cpp's, a Sequential of them): causal attention whose q/k/v reshape
// with -1 heads (so a colwise split keeps whole heads), an MLP, and a pre-norm block.

#include <accel/accel.h>

#include <torch/torch.h>

#include <cstdint>

namespace accel_test_gpt {

constexpr int64_t kDim = 16, kHeads = 4;

/// Causal self-attention whose q/k/v reshape with -1 heads, so a colwise split keeps whole heads.
/// The key projection has no bias: its gradient is zero up to rounding (softmax is invariant to
/// it), which no norm test can compare.
struct AttentionImpl : torch::nn::Module {
  AttentionImpl() {
    q = register_module("q", torch::nn::Linear(kDim, kDim));
    k = register_module("k", torch::nn::Linear(torch::nn::LinearOptions(kDim, kDim).bias(false)));
    v = register_module("v", torch::nn::Linear(kDim, kDim));
    o = register_module("o", torch::nn::Linear(kDim, kDim));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    // Shapes come from the projections, not from x: under sequence parallelism x holds a shard
    // of the sequence and q, k, v the whole of it (and under tensor parallelism their heads).
    const int64_t head_dim = kDim / kHeads;
    auto heads = [&](torch::nn::Linear& projection) {
      auto t = projection(x);
      return t.view({t.size(0), t.size(1), -1, head_dim}).transpose(1, 2);
    };
    // LibTorch's attention outside a context-parallel scope, ring attention inside one.
    auto y = accel::scaled_dot_product_attention(heads(q), heads(k), heads(v), {}, 0.0,
                                                 /*is_causal=*/true)
                 .transpose(1, 2);
    return o(y.reshape({y.size(0), y.size(1), -1}));
  }
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
};
TORCH_MODULE(Attention);

struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    up = register_module("up", torch::nn::Linear(kDim, 4 * kDim));
    down = register_module("down", torch::nn::Linear(4 * kDim, kDim));
  }
  torch::Tensor forward(const torch::Tensor& x) { return down(torch::gelu(up(x))); }
  torch::nn::Linear up{nullptr}, down{nullptr};
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    attn = register_module("attn", Attention());
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    mlp = register_module("mlp", Mlp());
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln1(x));
    return x + mlp(ln2(x));
  }
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

}  // namespace accel_test_gpt
