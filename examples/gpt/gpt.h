#pragma once

// A small GPT-style decoder (token and position embeddings, pre-norm blocks of causal
// self-attention and an MLP, a final norm and an untied head), plain LibTorch. Its weights come
// from LibTorch's default initialisers, so torch::manual_seed before building makes it
// deterministic.

#include <torch/torch.h>

#include <cmath>

namespace gpt {

struct Config {
  int64_t vocab = 256;
  int64_t context = 64;
  int64_t width = 64;
  int64_t heads = 4;
  int64_t layers = 4;
};

struct CausalSelfAttentionImpl : torch::nn::Module {
  explicit CausalSelfAttentionImpl(const Config& c)
      : head_dim(c.width / c.heads),
        q(register_module("q", torch::nn::Linear(c.width, c.width))),
        k(register_module("k", torch::nn::Linear(c.width, c.width))),
        v(register_module("v", torch::nn::Linear(c.width, c.width))),
        proj(register_module("proj", torch::nn::Linear(c.width, c.width))),
        // Computed by the constructor, not learned: kept real by init_empty_weights.
        mask(register_buffer("mask", torch::ones({c.context, c.context}).tril())) {}

  // Separate q, k, v reshaped with -1 heads, and shapes taken from them rather than from x, so
  // a tensor-parallel plan splits it by heads (q, k, v colwise, proj rowwise) and under sequence
  // parallelism, where x holds a shard of the sequence, q, k and v hold the whole of it.
  torch::Tensor forward(const torch::Tensor& x) {
    auto heads_of = [&](torch::nn::Linear& projection) {
      auto t = projection(x);
      return t.view({t.size(0), t.size(1), -1, head_dim}).transpose(1, 2);
    };
    auto qh = heads_of(q), kh = heads_of(k), vh = heads_of(v);
    const int64_t time = qh.size(2);
    auto scores = torch::matmul(qh, kh.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
    using torch::indexing::Slice;
    scores = scores.masked_fill(mask.index({Slice(0, time), Slice(0, time)}).to(x.device()) == 0,
                                -std::numeric_limits<float>::infinity());
    auto y = torch::matmul(torch::softmax(scores, -1), vh).transpose(1, 2);
    return proj(y.reshape({y.size(0), y.size(1), -1}));
  }

  int64_t head_dim;
  torch::nn::Linear q, k, v, proj;
  torch::Tensor mask;
};
TORCH_MODULE(CausalSelfAttention);

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const Config& c)
      : norm1(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})))),
        attention(register_module("attention", CausalSelfAttention(c))),
        norm2(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})))),
        up(register_module("up", torch::nn::Linear(c.width, 4 * c.width))),
        down(register_module("down", torch::nn::Linear(4 * c.width, c.width))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = x + attention(norm1(x));
    return x + down(torch::gelu(up(norm2(x))));
  }

  torch::nn::LayerNorm norm1;
  CausalSelfAttention attention;
  torch::nn::LayerNorm norm2;
  torch::nn::Linear up, down;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const Config& c)
      : tokens(register_module("tokens", torch::nn::Embedding(c.vocab, c.width))),
        positions(register_module("positions", torch::nn::Embedding(c.context, c.width))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})))),
        head(register_module("head", torch::nn::Linear(torch::nn::LinearOptions(c.width, c.vocab).bias(false)))) {
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(Block(c));
  }

  /// Logits for token ids of shape [batch, time].
  torch::Tensor forward(const torch::Tensor& ids) {
    // Positions shaped as the ids, [batch, time]: a sequence-parallel plan splits the lookups of
    // a position table on the sequence (dimension 1) as it does the tokens'.
    auto where = torch::arange(ids.size(1), ids.options()).expand_as(ids);
    auto x = tokens(ids) + positions(where);
    for (const auto& block : *blocks) x = block->as<BlockImpl>()->forward(x);
    return head(norm(x));
  }

  torch::nn::Embedding tokens, positions;
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm norm;
  torch::nn::Linear head;
};
TORCH_MODULE(Gpt);

}  // namespace gpt
