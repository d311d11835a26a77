// FULL_SHARD's memory, counted by the allocator: at most two units whole at once (FSDP's
// limit_all_gathers), in forward and in backward, whatever the number of units, and a step whose
// peak is the sharded state plus those two units, two units of gradients and the activations;
// and a model that does not fit a capped allocator under NO_SHARD trains under FULL_SHARD with
// activation checkpointing to NO_SHARD's weights. Run on 2 and on 4 processes by `accel launch`
// (see test/CMakeLists.txt).

#include <accel/accel.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "sharding/optimizer_shards.h"
#include "util/counting_allocator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

int64_t world_size() { return std::atoll(std::getenv("WORLD_SIZE")); }
bool is_main() { return std::atoll(std::getenv("RANK")) == 0; }

constexpr int64_t kWidth = 128;

/// `units` layers of kWidth, each its own unit (fsdp_transformer_layer_cls_to_wrap "Linear").
torch::nn::Sequential mlp(int64_t units) {
  torch::manual_seed(3);
  torch::nn::Sequential model;
  for (int64_t i = 0; i < units; ++i) {
    model->push_back(torch::nn::Linear(kWidth, kWidth));
    model->push_back(torch::nn::Tanh());
  }
  return model;
}

/// A transformer-style block: pre-norm self-attention and a 4x MLP, each added to its input.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width) {
    attention_norm =
        register_module("attention_norm", torch::nn::LayerNorm(std::vector<int64_t>{width}));
    attention = register_module("attention", torch::nn::MultiheadAttention(width, 4));
    mlp_norm = register_module("mlp_norm", torch::nn::LayerNorm(std::vector<int64_t>{width}));
    up = register_module("up", torch::nn::Linear(width, 4 * width));
    down = register_module("down", torch::nn::Linear(4 * width, width));
  }
  /// x: [sequence, batch, width].
  torch::Tensor forward(torch::Tensor x) {
    auto h = attention_norm(x);
    x = x + std::get<0>(attention(h, h, h));
    return x + down(torch::gelu(up(mlp_norm(x))));
  }
  torch::nn::LayerNorm attention_norm{nullptr}, mlp_norm{nullptr};
  torch::nn::MultiheadAttention attention{nullptr};
  torch::nn::Linear up{nullptr}, down{nullptr};
};
TORCH_MODULE(Block);

/// `blocks` blocks of width 64 in a Sequential, each its own unit ("Block").
torch::nn::Sequential transformer(int64_t blocks) {
  torch::manual_seed(3);
  torch::nn::Sequential model;
  for (int64_t i = 0; i < blocks; ++i) model->push_back(Block(64));
  return model;
}

/// One configuration: the model, what wraps its units, and a batch for it.
struct Case {
  std::string name;
  std::function<torch::nn::Sequential()> build;
  std::string unit_class;
  std::function<torch::Tensor()> input;
};

std::vector<Case> cases() {
  auto flat = [] {
    return torch::randn({16, kWidth}, at::make_generator<at::CPUGeneratorImpl>(1));
  };
  auto sequence = [] {
    return torch::randn({12, 4, 64}, at::make_generator<at::CPUGeneratorImpl>(1));
  };
  return {{"MLP, 6 units", [] { return mlp(6); }, "Linear", flat},
          {"MLP, 24 units", [] { return mlp(24); }, "Linear", flat},
          {"MLP, 48 units", [] { return mlp(48); }, "Linear", flat},
          {"8 transformer blocks", [] { return transformer(8); }, "Block", sequence}};
}

/// What one case measured, in bytes.
struct Measured {
  int64_t parameters = 0;     // P, elements
  int64_t unit = 0;           // the largest unit, whole
  int64_t shard = 0;          // the largest shard
  int64_t peak_gathered = 0;  // gathered units alive at once, at most
  int64_t activations = 0;    // the same model's activations under NO_SHARD, on the same batch
  int64_t sharded_state = 0;  // shards, their gradients, AdamW's two moments: 16P/N (padded)
  int64_t step_peak = 0;      // the whole step's peak of counted bytes
  int64_t step_bound = 0;     // what the design promises for it
  int64_t outside = 0;        // held before a step beyond the sharded state and the send buffer
  int64_t batch = 0;          // the batch's bytes
};

/// Live bytes once the frees still under way have happened: Gloo's worker thread drops its
/// references to a finished collective's tensors (a unit's gradients, one unit of bytes) a moment
/// after wait() returns, later on a loaded machine. Something held for good stays counted.
int64_t settled_live_bytes(const accel::util::CountingCpuAllocator& counter) {
  int64_t live = counter.live_bytes();
  for (int unchanged = 0, i = 0; unchanged < 5 && i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int64_t now = counter.live_bytes();
    unchanged = now == live ? unchanged + 1 : 0;
    live = now;
  }
  return live;
}

/// The most bytes a NO_SHARD step of `model` allocates beyond what it holds: activations and
/// backward's temporaries (gradients exist already, as from the second step on).
int64_t activations_of(const Case& c, accel::util::CountingCpuAllocator& counter) {
  auto model = c.build();
  const auto x = c.input();
  model->forward(x).pow(2).mean().backward();
  counter.reset_peak();
  const int64_t before = counter.live_bytes();
  model->forward(x).pow(2).mean().backward();
  return counter.peak_bytes() - before;
}

/// Allocator slack of the bound: the small tensors of a step (the loss, the batch's statistics,
/// the collectives' scalars) and the reduce-scatter's result before it joins the shard's gradient.
int64_t slack(const Measured& m) { return m.shard + (64 << 10); }

Measured measure(const Case& c, size_t units_whole) {
  accel::util::CountingCpuAllocator counter;
  Measured m;
  m.activations = activations_of(c, counter);
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .sharding_strategy("FULL_SHARD")
                                     .fsdp_transformer_layer_cls_to_wrap({c.unit_class}));
  auto model = c.build();
  for (const auto& p : model->parameters()) m.parameters += p.numel();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), {}));
  auto& shards = *accel::sharding::shards_of(optimizer);
  shards.set_units_whole(units_whole);
  const auto x = c.input();
  auto step = [&] {
    accelerator.backward(model->forward(x).pow(2).mean());
    optimizer.step();
  };
  // The first step makes AdamW's moments and the send buffer, which later steps hold.
  step();
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) m.sharded_state += 4 * p.nbytes();
  }
  optimizer.zero_grad();
  shards.reset_gather_peak();
  counter.reset_peak();
  const int64_t held = settled_live_bytes(counter);
  step();
  m.step_peak = counter.peak_bytes();
  optimizer.zero_grad();
  const auto statistics = shards.gather_statistics();
  m.unit = statistics.largest_unit_bytes;
  m.shard = statistics.largest_shard_bytes;
  m.peak_gathered = statistics.peak_bytes;
  // What the step holds before it starts beyond 12P/N (shards and moments): the send buffer
  // (one unit) and the batch. The step adds the shards' gradients (4P/N), two units gathered,
  // one more unit of gradients (the unit backward is computing; the send buffer is the other),
  // and the activations.
  m.outside = held - m.sharded_state / 4 * 3 - m.unit;
  m.batch = static_cast<int64_t>(x.nbytes());
  m.step_bound = m.sharded_state + 2 * m.unit + 2 * m.unit + m.activations + m.outside + slack(m);
  return m;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

class ShardingMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GE(world_size(), 2) << "run me with accel launch --num_processes 2 (or 4)";
  }
};

TEST_F(ShardingMemory, FullShardKeepsAtMostTwoUnitsGatheredAndItsStepWithinTheBound) {
  if (is_main()) {
    std::printf(
        "| model | processes | P | unit | peak gathered | 2 units + shard | step peak | "
        "bound | 16P/N |\n|---|---|---|---|---|---|---|---|---|\n");
  }
  for (const auto& c : cases()) {
    const auto m = measure(c, 2);
    EXPECT_LE(m.peak_gathered, 2 * m.unit + m.shard) << c.name;
    // Two units at least were whole at once: the bound is not met by gathering nothing.
    EXPECT_GE(m.peak_gathered, 2 * m.unit - m.shard) << c.name;
    EXPECT_LE(m.step_peak, m.step_bound) << c.name;
    // Between steps nothing is held but the sharded state, the send buffer and the batch.
    EXPECT_LE(m.outside, m.batch + (64 << 10)) << c.name;
    if (is_main()) {
      std::printf(
          "| %s | %lld | %lld | %.3f MiB | %.3f MiB | %.3f MiB | %.3f MiB | %.3f MiB | "
          "%.3f MiB |\n",
          c.name.c_str(), static_cast<long long>(world_size()),
          static_cast<long long>(m.parameters), mib(m.unit), mib(m.peak_gathered),
          mib(2 * m.unit + m.shard), mib(m.step_peak), mib(m.step_bound),
          mib(16 * m.parameters / world_size()));
    }
  }
}

TEST_F(ShardingMemory, ABoundThatAThirdUnitKeptWouldBreak) {
  // The same measurement with a window of three units: the gathered bound fails, so the test
  // above would catch a third unit kept whole.
  const auto c = cases()[1];
  const auto m = measure(c, 3);
  EXPECT_GT(m.peak_gathered, 2 * m.unit + m.shard);
  if (is_main()) {
    std::printf(
        "%s with three units whole: peak gathered %.3f MiB > 2 units + shard %.3f MiB; "
        "step peak %.3f MiB against its bound %.3f MiB\n",
        c.name.c_str(), mib(m.peak_gathered), mib(2 * m.unit + m.shard), mib(m.step_peak),
        mib(m.step_bound));
  }
}

/// Bytes the FULL_SHARD gathers of one step of the 6-unit MLP received, under `mixed_precision`,
/// and the weights after it.
std::pair<int64_t, std::vector<torch::Tensor>> gathered_in_one_step(
    const std::string& strategy, const std::string& mixed_precision,
    const accel::Fp8Options& fp8 = {}) {
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .mixed_precision(mixed_precision)
                                     .fp8(fp8)
                                     .fsdp_reduce_dtype("fp32")  // NO_SHARD's reduction
                                     .sharding_strategy(strategy)
                                     .fsdp_transformer_layer_cls_to_wrap({"Linear"}));
  auto model = mlp(6);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
  const auto x = torch::randn(
      {16, kWidth}, at::make_generator<at::CPUGeneratorImpl>(accelerator.process_index()));
  {
    auto scope = accelerator.accumulate(model);  // autocast, as the Accelerator sets it
    accelerator.backward(model->forward(x).pow(2).mean());
    optimizer.step();
    optimizer.zero_grad();
  }
  const auto& shards = accel::sharding::shards_of(optimizer);
  const int64_t gathered = shards ? shards->gather_statistics().gathered_bytes : 0;
  std::vector<torch::Tensor> weights;  // read after counting: reading gathers too
  for (const auto& p : model->parameters()) weights.push_back(p.detach().clone());
  return {gathered, weights};
}

TEST_F(ShardingMemory, UnderBf16TheUnitsAreGatheredInBf16) {
  // Autocast casts each weight to bf16; the unit is gathered as bf16 shards instead of fp32 ones
  // cast after: half the bytes, the same bits. Shards, gradients and AdamW stay fp32.
  const auto fp32 = gathered_in_one_step("FULL_SHARD", "no");
  const auto bf16 = gathered_in_one_step("FULL_SHARD", "bf16");
  EXPECT_GT(bf16.first, 0);
  EXPECT_EQ(bf16.first * 2, fp32.first);
  const auto reference = gathered_in_one_step("NO_SHARD", "bf16");
  double worst = 0;
  for (size_t i = 0; i < reference.second.size(); ++i) {
    EXPECT_EQ(bf16.second[i].scalar_type(), torch::kFloat);
    worst = std::max(worst, (bf16.second[i] - reference.second[i]).abs().max().item<double>());
  }
  EXPECT_LE(worst, 1e-6);
  if (is_main()) {
    std::printf(
        "one FULL_SHARD step of the 6-unit MLP on %lld processes gathers %lld bytes "
        "under fp32, %lld under bf16; bf16 weights within %.3g of NO_SHARD's\n",
        static_cast<long long>(world_size()), static_cast<long long>(fp32.first),
        static_cast<long long>(bf16.first), worst);
  }
}

TEST_F(ShardingMemory, UnderFp8TheConvertedWeightsAreGatheredInFp8) {
  // torchao's float8 all-gather: the four converted Linears' units (not the first and the last)
  // travel as one byte per element plus their biases in bf16, half of bf16's bytes; the result
  // is the same bits as gathering the fp32 weights and casting them whole.
  const auto bf16 = gathered_in_one_step("FULL_SHARD", "bf16");
  const auto fp8 = gathered_in_one_step("FULL_SHARD", "fp8");
  const auto whole_then_cast =
      gathered_in_one_step("FULL_SHARD", "fp8", accel::Fp8Options().fsdp_float8_all_gather(false));
  for (size_t i = 0; i < fp8.second.size(); ++i) {
    EXPECT_TRUE(torch::equal(fp8.second[i], whole_then_cast.second[i])) << "parameter " << i;
  }
  // Per unit gather: bf16 moves 2 bytes per element; fp8 1, plus its bias (128 elements, on the
  // last process) in a bf16 slot on each process.
  const int64_t unit = kWidth * kWidth + kWidth;
  const int64_t processes = world_size();
  const int64_t padded = (unit + processes - 1) / processes * processes;
  const int64_t bf16_unit = 2 * padded;
  const int64_t fp8_unit = padded + 2 * kWidth * processes;
  // The same gathers in both runs: the six units in forward, and the middle ones again in
  // backward (the first's weight is not needed there; the last two are still whole). Two of
  // them (the first and the last unit, once each) are not converted.
  const int64_t gathers = bf16.first / bf16_unit;
  EXPECT_EQ(gathers * bf16_unit, bf16.first);
  EXPECT_EQ(fp8.first, 2 * bf16_unit + (gathers - 2) * fp8_unit) << "bf16 " << bf16.first;
  EXPECT_LT(fp8.first * 10, bf16.first * 7);
  if (is_main()) {
    std::printf(
        "one FULL_SHARD step of the 6-unit MLP on %lld processes gathers %lld bytes under bf16, "
        "%lld under fp8 (%.3f; the four FP8 units' gathers %.3f of bf16's), %lld with the "
        "float8 all-gather off\n",
        static_cast<long long>(processes), static_cast<long long>(bf16.first),
        static_cast<long long>(fp8.first),
        static_cast<double>(fp8.first) / static_cast<double>(bf16.first),
        static_cast<double>(fp8_unit) / static_cast<double>(bf16_unit),
        static_cast<long long>(whole_then_cast.first));
  }
}

/// One bf16 run of the 6-unit MLP with gradients reduce-scattered in `reduce_dtype`: the shards'
/// gradients after the first backward, the bytes that backward sent, and the loss of 8 steps.
struct ReducedRun {
  std::vector<torch::Tensor> first_gradients;
  int64_t sent_bytes = 0;
  std::vector<double> losses;
};
ReducedRun reduced_in(const std::string& strategy, const std::string& reduce_dtype) {
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .mixed_precision("bf16")
                                     .fsdp_reduce_dtype(reduce_dtype)
                                     .sharding_strategy(strategy)
                                     .fsdp_transformer_layer_cls_to_wrap({"Linear"}));
  auto model = mlp(6);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-3));
  ReducedRun run;
  for (int step = 0; step < 8; ++step) {
    const auto x = torch::randn({16, kWidth}, at::make_generator<at::CPUGeneratorImpl>(
                                                  step * 10 + accelerator.process_index()));
    auto scope = accelerator.accumulate(model);
    auto loss = model->forward(x).pow(2).mean();
    accelerator.backward(loss);
    run.losses.push_back(
        accelerator.reduce(loss.detach().to(torch::kFloat), accel::Reduction::Mean).item<double>());
    if (step == 0) {
      run.sent_bytes = accel::sharding::shards_of(optimizer)->reduce_scattered_bytes();
      for (const auto& shard : optimizer.param_groups()[0].params())
        run.first_gradients.push_back(shard.grad().clone());
    }
    optimizer.step();
    optimizer.zero_grad();
  }
  return run;
}

TEST_F(ShardingMemory, UnderBf16GradientsAreReduceScatteredInBf16) {
  // Accelerate's MixedPrecision default: reduce_dtype is the mixed precision dtype. Half the
  // bytes on the wire; each slice summed over N processes in bf16 stays within N * 2^-8 of the
  // fp32 sum (relative, over the whole gradient); the shards stay fp32.
  for (const std::string strategy : {"SHARD_GRAD_OP", "FULL_SHARD"}) {
    const auto fp32 = reduced_in(strategy, "fp32");
    const auto bf16 = reduced_in(strategy, "bf16");
    EXPECT_EQ(bf16.sent_bytes * 2, fp32.sent_bytes) << strategy;
    double difference = 0, norm = 0;
    for (size_t i = 0; i < fp32.first_gradients.size(); ++i) {
      EXPECT_EQ(bf16.first_gradients[i].scalar_type(), torch::kFloat);
      difference += (bf16.first_gradients[i] - fp32.first_gradients[i]).pow(2).sum().item<double>();
      norm += fp32.first_gradients[i].pow(2).sum().item<double>();
    }
    const double relative = std::sqrt(difference / norm);
    EXPECT_LE(relative, static_cast<double>(world_size()) / 256.0) << strategy;
    EXPECT_GT(relative, 0.0) << strategy << ": the bf16 sum should round somewhere";
    if (is_main()) {
      std::printf(
          "%s, bf16 on %lld processes: reduce-scatters sent %lld bytes in fp32, %lld in "
          "bf16; first gradients within %.3g (relative) of fp32's\nloss by step, fp32 "
          "reduce | bf16 reduce:",
          strategy.c_str(), static_cast<long long>(world_size()),
          static_cast<long long>(fp32.sent_bytes), static_cast<long long>(bf16.sent_bytes),
          relative);
      for (size_t i = 0; i < fp32.losses.size(); ++i)
        std::printf(" %.6f|%.6f", fp32.losses[i], bf16.losses[i]);
      std::printf("\n");
    }
  }
}

/// What `steps` AdamW steps of the 24-unit MLP (each Linear a unit) leave under `options`, each
/// process its own batches: the weights, and under FULL_SHARD what the gathers did.
struct TrainedMlp {
  std::vector<torch::Tensor> weights;
  accel::sharding::OptimizerShards::GatherStatistics gathers;
};
TrainedMlp train_mlp(accel::AcceleratorOptions options, int steps) {
  accel::Accelerator accelerator(options.cpu(true).fsdp_transformer_layer_cls_to_wrap({"Linear"}));
  auto model = mlp(24);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-3));
  for (int step = 0; step < steps; ++step) {
    auto x = torch::randn({16, kWidth}, at::make_generator<at::CPUGeneratorImpl>(
                                            step * 10 + accelerator.process_index()));
    accelerator.backward(model->forward(x).pow(2).mean());
    optimizer.step();
    optimizer.zero_grad();
  }
  TrainedMlp out;
  if (const auto& shards = accel::sharding::shards_of(optimizer);
      shards && shards->shards_parameters())
    out.gathers = shards->gather_statistics();
  for (const auto& p : model->parameters()) out.weights.push_back(p.detach().clone());
  return out;
}

/// Four FULL_SHARD steps with prefetch `on` (forward and BACKWARD_PRE) or off.
TrainedMlp prefetched_run(bool on) {
  return train_mlp(accel::AcceleratorOptions()
                       .sharding_strategy("FULL_SHARD")
                       .fsdp_forward_prefetch(on)
                       .fsdp_backward_prefetch(on ? "BACKWARD_PRE" : "NO_PREFETCH"),
                   4);
}

TEST_F(ShardingMemory, PrefetchGathersAheadWithinTwoUnitsAndTrainsTheSame) {
  const auto without = prefetched_run(false), with = prefetched_run(true);
  const auto& plain = without.gathers;
  const auto& prefetched = with.gathers;
  // From the second step on, every unit but the first of each pass is gathered ahead.
  EXPECT_EQ(plain.prefetches, 0);
  EXPECT_GT(prefetched.prefetches, 3 * 24);
  EXPECT_EQ(prefetched.gathers, plain.gathers);
  EXPECT_LE(prefetched.peak_bytes,
            2 * prefetched.largest_unit_bytes + prefetched.largest_shard_bytes);
  for (size_t i = 0; i < with.weights.size(); ++i) {
    EXPECT_TRUE(torch::equal(with.weights[i], without.weights[i])) << "parameter " << i;
  }
  if (is_main()) {
    std::printf(
        "prefetch on %lld processes, 24 units, 4 steps: %lld of %lld gathers ahead; "
        "time waiting for gathers %.4f s with, %.4f s without\n",
        static_cast<long long>(world_size()), static_cast<long long>(prefetched.prefetches),
        static_cast<long long>(prefetched.gathers), prefetched.gather_wait_seconds,
        plain.gather_wait_seconds);
  }
}

/// Weights after 6 steps under `strategy`, units checkpointed with `checkpointing`.
std::vector<torch::Tensor> checkpointed_run(const std::string& strategy, bool checkpointing) {
  return train_mlp(
             accel::AcceleratorOptions().sharding_strategy(strategy).fsdp_activation_checkpointing(
                 checkpointing),
             6)
      .weights;
}

TEST_F(ShardingMemory, AModelThatDoesNotFitTheCapUnderNoShardTrainsUnderFullShard) {
  // What NO_SHARD takes, counted from before the model is built: the cap is two thirds of it.
  int64_t no_shard_peak = 0;
  std::vector<torch::Tensor> reference;
  {
    accel::util::CountingCpuAllocator counter;
    reference = checkpointed_run("NO_SHARD", false);
    no_shard_peak = counter.peak_bytes();
  }
  const int64_t cap = no_shard_peak * 2 / 3;
  std::vector<torch::Tensor> capped;
  int64_t full_shard_peak = 0;
  {
    accel::util::CountingCpuAllocator counter(cap);
    capped = checkpointed_run("FULL_SHARD", true);
    full_shard_peak = counter.peak_bytes();
  }
  EXPECT_GT(no_shard_peak, cap);
  EXPECT_LE(full_shard_peak, cap);
  double worst = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    worst = std::max(worst, (reference[i] - capped[i]).abs().max().item<double>());
  }
  EXPECT_LE(worst, 1e-6);
  if (is_main()) {
    std::printf(
        "24-unit MLP on %lld processes: NO_SHARD peaks at %.2f MiB, over the cap of "
        "%.2f MiB; FULL_SHARD with activation checkpointing peaks at %.2f MiB under it, "
        "largest weight difference from NO_SHARD %.3g\n",
        static_cast<long long>(world_size()), mib(no_shard_peak), mib(cap), mib(full_shard_peak),
        worst);
  }
}

/// The 24-unit MLP and a last layer of 4.2M weights: more than a load reads at once, so each
/// process fills its part of that layer in several pieces.
torch::nn::Sequential mlp_with_a_wide_head() {
  auto model = mlp(24);
  model->push_back(torch::nn::Linear(kWidth, 32768));
  return model;
}

TEST_F(ShardingMemory, AnEmptyModelIsFilledPartByPartWithoutAWholeCopy) {
  // The checkpoint: the model as two files and an index, the second file (the wide head's among
  // them) in bf16, loaded into fp32 parameters. Rank 0 writes it; every process then builds the
  // model empty, prepares it with FULL_SHARD and loads: each reads the bytes of its own elements
  // only.
  const std::string dir = "/tmp/accel-empty-load-" + std::string(std::getenv("MASTER_PORT"));
  const int64_t rank = std::atoll(std::getenv("RANK"));
  auto reference = mlp_with_a_wide_head();
  accel::NamedTensors first_half, second_half;
  std::vector<torch::Tensor> expected;
  int64_t parameters = 0;
  {
    const auto named = reference->named_parameters();
    for (size_t i = 0; i < named.size(); ++i) {
      const auto& item = named[i];
      const bool first = i < named.size() / 2;
      auto value = item.value().detach();
      if (!first) value = value.to(torch::kBFloat16);
      (first ? first_half : second_half).emplace_back(item.key(), value);
      expected.push_back(value.to(torch::kFloat));
      parameters += value.numel();
    }
  }
  const int64_t file_bytes =
      accel::safetensors_data_bytes(first_half) + accel::safetensors_data_bytes(second_half);
  {
    accel::Accelerator writer(accel::AcceleratorOptions().cpu(true));
    if (rank == 0) {
      std::filesystem::create_directories(dir);
      accel::save_safetensors(dir + "/model-00001-of-00002.safetensors", first_half);
      accel::save_safetensors(dir + "/model-00002-of-00002.safetensors", second_half);
      std::ofstream index(dir + "/model.safetensors.index.json");
      index << "{\"metadata\": {}, \"weight_map\": {";
      const char* separator = "";
      for (const auto& [name, value] : first_half) {
        index << separator << "\"" << name << "\": \"model-00001-of-00002.safetensors\"";
        separator = ", ";
      }
      for (const auto& [name, value] : second_half) {
        index << separator << "\"" << name << "\": \"model-00002-of-00002.safetensors\"";
      }
      index << "}}";
    }
    writer.wait_for_everyone();
  }
  // Under NO_SHARD an empty model cannot be prepared: a clear error, before any collective.
  {
    accel::Accelerator plain(accel::AcceleratorOptions().cpu(true));
    auto empty = accel::init_empty_weights(mlp_with_a_wide_head);
    try {
      plain.prepare(empty);
      ADD_FAILURE() << "an empty model was prepared under NO_SHARD";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("init_empty_weights"), std::string::npos) << e.what();
    }
  }
  accel::util::CountingCpuAllocator counter;
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .sharding_strategy("FULL_SHARD")
                                     .fsdp_transformer_layer_cls_to_wrap({"Linear"}));
  auto model = accel::init_empty_weights(mlp_with_a_wide_head);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-3));
  const int64_t prepared = counter.peak_bytes();
  const auto loaded = accel::load_checkpoint_in_model(model, dir);
  const int64_t peak = counter.peak_bytes();
  const int64_t n = world_size();
  // This process's part of the files, and no more (the units' padding aside).
  EXPECT_LE(loaded.bytes_read, file_bytes / n + 25 * 4 * n);
  EXPECT_GE(loaded.bytes_read, file_bytes / n / 2);  // a bf16 half reads half the bytes
  // Never a whole copy, nor a whole part: prepare allocates the shards (4P/N and the units'
  // padding) and nothing else; the load adds one piece read (at most 4 MiB, as bf16 2 MiB) and
  // its cast to fp32 (4 MiB).
  const int64_t shards = 4 * parameters / n + 25 * 4 * n;
  EXPECT_LE(prepared, shards + (64 << 10));
  EXPECT_LE(peak, shards + (6 << 20) + (64 << 10));
  // The result is a whole load's, tensor for tensor (reading a parameter gathers its unit).
  const auto got = model->parameters();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::equal(got[i].detach().clone(), expected[i])) << "parameter " << i;
  }
  if (is_main()) {
    std::printf(
        "empty 24-unit MLP with a wide head (%.2f MiB of fp32 weights, %.2f MiB of files) on "
        "%lld processes: prepare + load read %.2f MiB here, peak %.2f MiB counted (%.2f MiB "
        "after prepare; shards %.2f MiB)\n",
        mib(parameters * 4), mib(file_bytes), static_cast<long long>(n), mib(loaded.bytes_read),
        mib(peak), mib(prepared), mib(shards));
  }
  accelerator.wait_for_everyone();
  if (rank == 0) std::filesystem::remove_all(dir);
}

}  // namespace
