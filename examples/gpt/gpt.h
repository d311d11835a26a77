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
      : heads(c.heads),
        qkv(register_module("qkv", torch::nn::Linear(c.width, 3 * c.width))),
        proj(register_module("proj", torch::nn::Linear(c.width, c.width))),
        // Computed by the constructor, not learned: kept real by init_empty_weights.
        mask(register_buffer("mask", torch::ones({c.context, c.context}).tril())) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const auto batch = x.size(0), time = x.size(1), width = x.size(2);
    auto split = qkv(x).split(width, /*dim=*/2);
    auto heads_of = [&](const torch::Tensor& t) {
      return t.view({batch, time, heads, width / heads}).transpose(1, 2);
    };
    auto q = heads_of(split[0]), k = heads_of(split[1]), v = heads_of(split[2]);
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(width / heads));
    using torch::indexing::Slice;
    scores = scores.masked_fill(mask.index({Slice(0, time), Slice(0, time)}).to(x.device()) == 0,
                                -std::numeric_limits<float>::infinity());
    auto y = torch::matmul(torch::softmax(scores, -1), v);
    return proj(y.transpose(1, 2).contiguous().view({batch, time, width}));
  }

  int64_t heads;
  torch::nn::Linear qkv, proj;
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
    auto where = torch::arange(ids.size(1), ids.options());
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
