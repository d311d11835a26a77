// A GPT-style model named as docs/guide/parallelism.md's plan names it, for its snippets:
// `model` (wte, wpe, blocks.N.attn.{q,k,v,o}, blocks.N.mlp.{up,down}, head; forward(tokens,
// positions)), `tokens`, `targets` and `loss(logits, targets)`.
#include <accel/accel.h>
#include <torch/torch.h>

struct AttentionImpl : torch::nn::Module {
  AttentionImpl()
      : q(register_module("q", torch::nn::Linear(16, 16))),
        k(register_module("k", torch::nn::Linear(16, 16))),
        v(register_module("v", torch::nn::Linear(16, 16))),
        o(register_module("o", torch::nn::Linear(16, 16))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto heads = [&](torch::nn::Linear& p) {
      return p(x).view({x.size(0), x.size(1), -1, 4}).transpose(1, 2);
    };
    auto y = accel::scaled_dot_product_attention(heads(q), heads(k), heads(v), {}, 0.0, true);
    return o(y.transpose(1, 2).reshape({x.size(0), x.size(1), -1}));
  }
  torch::nn::Linear q, k, v, o;
};
TORCH_MODULE(Attention);

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : up(register_module("up", torch::nn::Linear(16, 64))),
        down(register_module("down", torch::nn::Linear(64, 16))) {}
  torch::Tensor forward(const torch::Tensor& x) { return down(torch::gelu(up(x))); }
  torch::nn::Linear up, down;
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  BlockImpl() : attn(register_module("attn", Attention())), mlp(register_module("mlp", Mlp())) {}
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(x);
    return x + mlp(x);
  }
  Attention attn;
  Mlp mlp;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl()
      : wte(register_module("wte", torch::nn::Embedding(32, 16))),
        wpe(register_module("wpe", torch::nn::Embedding(8, 16))),
        blocks(register_module("blocks", torch::nn::ModuleList(Block(), Block()))),
        head(register_module("head", torch::nn::Linear(16, 32))) {}
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions) {
    auto x = wte(tokens) + wpe(positions);
    for (const auto& block : *blocks) x = block->as<Block>()->forward(x);
    return head(x);
  }
  torch::nn::Embedding wte, wpe;
  torch::nn::ModuleList blocks;
  torch::nn::Linear head;
};
TORCH_MODULE(Gpt);

inline torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

int main() {
  Gpt model;
  auto tokens = torch::randint(32, {2, 8});
  auto targets = torch::randint(32, {2, 8});
  // @snippet
  return 0;
}
