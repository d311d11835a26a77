// What tensor and context parallelism move and hold, per training step, against the counts they
// are designed to: Megatron's for tensor parallelism (two all-reduces of a block's activations in
// forward and two in backward, plus the vocabulary-parallel embedding's and the head's), ring
// attention's for context parallelism ((cp - 1) K/V blocks per attention in forward; in backward
// (cp - 1) K/V blocks and cp blocks of their gradients), and the parameter + gradient + AdamW
// bytes each process holds against 16 P / (tp * dp_shard). Bytes are counted where the runtime
// sends them (parallel/traffic.h); the model is a GPT of 4 blocks of width 256 with q, k and v
// as three Linear layers, on batches of 4 sequences of 128 tokens.
//   accel launch --num_processes 4 build/bench/accel_bench_parallelism tp [STEPS]
//   accel launch --num_processes 4 build/bench/accel_bench_parallelism cp [STEPS]
// tp runs the job as tp_size = processes, cp as cp_size = processes; each prints medians over
// the steps after the first.

#include <accel/accel.h>
#include <torch/torch.h>

#include "bench_util.h"
#include "parallel/traffic.h"
#include "util/counting_allocator.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace {

constexpr int64_t kLayers = 4, kDim = 256, kHeads = 8, kVocab = 512, kSeq = 128, kBatch = 4;

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    q = register_module("q", torch::nn::Linear(kDim, kDim));
    k = register_module("k", torch::nn::Linear(kDim, kDim));
    v = register_module("v", torch::nn::Linear(kDim, kDim));
    o = register_module("o", torch::nn::Linear(kDim, kDim));
    up = register_module("up", torch::nn::Linear(kDim, 4 * kDim));
    down = register_module("down", torch::nn::Linear(4 * kDim, kDim));
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
  }
  torch::Tensor forward(torch::Tensor x) {
    const int64_t b = x.size(0), s = x.size(1);
    auto h = ln1(x);
    auto heads = [&](torch::nn::Linear& p) {
      return p(h).view({b, s, -1, kDim / kHeads}).transpose(1, 2);
    };
    auto y = accel::scaled_dot_product_attention(heads(q), heads(k), heads(v), {}, 0.0, true);
    x = x + o(y.transpose(1, 2).reshape({b, s, -1}));
    return x + down(torch::gelu(up(ln2(x))));
  }
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, up{nullptr}, down{nullptr};
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl() {
    wte = register_module("wte", torch::nn::Embedding(kVocab, kDim));
    wpe = register_module("wpe", torch::nn::Embedding(kSeq, kDim));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < kLayers; ++i) blocks->push_back(Block());
    head = register_module("head", torch::nn::Linear(kDim, kVocab));
  }
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions) {
    auto x = wte(tokens) + wpe(positions);
    for (const auto& block : *blocks) x = block->as<Block>()->forward(x);
    return head(x);
  }
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Gpt);

double mib(double bytes) { return bytes / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "tp";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 5;
  const int64_t n = std::atoll(std::getenv("WORLD_SIZE") ? std::getenv("WORLD_SIZE") : "1");
  auto config =
      mode == "cp" ? accel::ParallelismConfig().cp_size(n) : accel::ParallelismConfig().tp_size(n);
  accel::Accelerator accelerator(accel::AcceleratorOptions().parallelism_config(config));
  // Every tensor allocated from here on is counted: the memory figure below is the allocator's.
  accel::util::CountingCpuAllocator counted;
  torch::manual_seed(0);
  Gpt model;
  int64_t whole = 0;
  for (const auto& p : model->parameters()) whole += p.numel();
  accelerator.prepare(model, accel::TensorParallelPlan{{"wte", "embedding_rowwise"},
                                                       {"blocks.*.q", "colwise"},
                                                       {"blocks.*.k", "colwise"},
                                                       {"blocks.*.v", "colwise"},
                                                       {"blocks.*.o", "rowwise"},
                                                       {"blocks.*.up", "colwise"},
                                                       {"blocks.*.down", "rowwise"},
                                                       {"head", "colwise_rep"}});
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters()));
  auto& traffic = accel::parallel::parallel_traffic();
  std::vector<double> tp_bytes, cp_bytes;
  int64_t state_bytes = 0;  // live after a step, before zero_grad: weights, gradients, AdamW
  for (int step = 0; step <= steps; ++step) {
    auto tokens = torch::randint(kVocab, {kBatch, kSeq});
    auto targets = torch::randint(kVocab, {kBatch, kSeq});
    auto positions = torch::arange(kSeq).expand({kBatch, kSeq});
    const int64_t tp_before = traffic.tp_bytes, cp_before = traffic.cp_bytes;
    {
      auto scope = accelerator.maybe_context_parallel({&tokens, &targets, &positions}, {1, 1, 1});
      auto logits = model(tokens, positions);
      accelerator.backward(
          torch::cross_entropy_loss(logits.reshape({-1, kVocab}), targets.reshape({-1})));
    }
    optimizer.step();
    state_bytes = counted.live_bytes();
    optimizer.zero_grad();
    if (step == 0) continue;  // the first step also allocates
    tp_bytes.push_back(static_cast<double>(traffic.tp_bytes - tp_before));
    cp_bytes.push_back(static_cast<double>(traffic.cp_bytes - cp_before));
  }
  // Activation memory, counted: the most a forward and backward adds to the live bytes, over the
  // whole sequence and over this process's context-parallel shard of it. The gradients stay
  // allocated (zeroed in place), so only activations and temporaries are counted.
  auto activation_peak = [&](bool shard) {
    auto tokens = torch::randint(kVocab, {kBatch, kSeq});
    auto targets = torch::randint(kVocab, {kBatch, kSeq});
    auto positions = torch::arange(kSeq).expand({kBatch, kSeq});
    optimizer.zero_grad(/*set_to_none=*/false);
    const int64_t before = counted.live_bytes();
    counted.reset_peak();
    {
      std::optional<accel::ContextParallelScope> scope;
      if (shard) {
        scope.emplace(
            accelerator.maybe_context_parallel({&tokens, &targets, &positions}, {1, 1, 1}));
      }
      auto logits = model(tokens, positions);
      accelerator.backward(
          torch::cross_entropy_loss(logits.reshape({-1, kVocab}), targets.reshape({-1})));
    }
    return static_cast<double>(counted.peak_bytes() - before);
  };
  std::vector<double> whole_peaks, shard_peaks;
  for (int i = 0; i < 3; ++i) {
    whole_peaks.push_back(activation_peak(false));
    shard_peaks.push_back(activation_peak(true));
  }
  int64_t held = 0;
  for (const auto& p : model->parameters()) held += p.numel();
  const double activation = 4.0 * kBatch * kSeq * kDim;  // one [B, S, D] fp32 tensor
  if (!accelerator.is_main_process()) return 0;
  std::printf("%s over %lld processes, %d steps (medians per step)\n", mode.c_str(),
              static_cast<long long>(n), steps);
  if (mode == "tp") {
    // Megatron: per block 2 all-reduces in forward (attention's and the MLP's output) and 2 in
    // backward (their inputs' gradients); the embedding's lookups in forward and the head's
    // input gradient in backward; the head's output gathered (its slice's bytes).
    const double megatron = (4.0 * kLayers + 2.0) * activation + 4.0 * kBatch * kSeq * (kVocab / n);
    const double measured = accel_bench::median(tp_bytes);
    std::printf("  tp bytes: %.2f MiB, Megatron's count %.2f MiB: %.2fx\n", mib(measured),
                mib(megatron), measured / megatron);
    std::printf(
        "  (q, k and v are three colwise layers over one input: their gradients are summed\n"
        "   before its one all-reduce, as for Megatron's fused qkv)\n");
  } else {
    const double block = 2.0 * 4.0 * kBatch * kSeq / n * kDim;  // this process's K and V
    const double ring = kLayers * ((n - 1) * block + (n - 1) * block + n * block);
    const double measured = accel_bench::median(cp_bytes);
    std::printf(
        "  cp bytes sent: %.2f MiB, ring attention's count %.2f MiB: %.2fx\n"
        "  (per attention: %lld K/V blocks in forward, %lld in backward and %lld of "
        "their gradients; %.0f KiB each)\n",
        mib(measured), mib(ring), measured / ring, static_cast<long long>(n - 1),
        static_cast<long long>(n - 1), static_cast<long long>(n), block / 1024);
    const double whole_peak = accel_bench::median(whole_peaks);
    const double shard_peak = accel_bench::median(shard_peaks);
    std::printf(
        "  activations (forward + backward's peak, counted): %.2f MiB for this process's %lld of "
        "the %lld tokens, %.2f MiB for all of them: %.3fx (1/cp = %.3f)\n",
        mib(shard_peak), static_cast<long long>(kSeq / n), static_cast<long long>(kSeq),
        mib(whole_peak), shard_peak / whole_peak, 1.0 / static_cast<double>(n));
  }
  const double bound = 16.0 * whole / (config.tp_size() * config.dp_shard_size());
  std::printf(
      "  parameters + gradients + AdamW state: %.2f MiB per process counted by the allocator "
      "(%.2f MiB by numel); 16P/(tp*dp_shard) = %.2f MiB: %.2fx (wpe and the rowwise biases are "
      "whole on every process)\n",
      mib(static_cast<double>(state_bytes)), mib(16.0 * held), mib(bound),
      static_cast<double>(state_bytes) / bound);
  return 0;
}
