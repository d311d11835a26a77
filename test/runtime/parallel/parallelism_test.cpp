// The device mesh and tensor parallelism, with real processes started by `accel launch` (see
// test/CMakeLists.txt for the process count of each case): a GPT-style model trained on a mesh
// against the same program on plain LibTorch in one process, on the same global batches.
// Collectives go over Gloo.

#include <accel/accel.h>

#include "gpt_blocks.h"
#include "util/counting_allocator.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

int64_t world_size() { return std::atoll(std::getenv("WORLD_SIZE")); }

using accel_test_gpt::Block;
using accel_test_gpt::kDim;
using accel_test_gpt::kHeads;
constexpr int64_t kVocab = 32, kSeq = 8, kBatch = 2;

struct GptImpl : torch::nn::Module {
  GptImpl() {
    wte = register_module("wte", torch::nn::Embedding(kVocab, kDim));
    wpe = register_module("wpe", torch::nn::Embedding(kSeq, kDim));
    blocks = register_module("blocks", torch::nn::ModuleList(Block(), Block()));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    head = register_module("head", torch::nn::Linear(kDim, kVocab));
  }
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions) {
    auto x = wte(tokens) + wpe(positions);
    for (const auto& block : *blocks) x = block->as<Block>()->forward(x);
    return head(ln_f(x));
  }
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Gpt);

/// A Megatron plan for Gpt: heads and the MLP's hidden features split, the vocabulary split in
/// the embedding, the head's output gathered; with `sequence_parallel`, the LayerNorms and the
/// position embedding's lookups on the sequence's shards.
accel::TensorParallelPlan gpt_plan(bool sequence_parallel = false) {
  accel::TensorParallelPlan plan{{"wte", "embedding_rowwise"},     {"blocks.*.attn.q", "colwise"},
                                 {"blocks.*.attn.k", "colwise"},   {"blocks.*.attn.v", "colwise"},
                                 {"blocks.*.attn.o", "rowwise"},   {"blocks.*.mlp.up", "colwise"},
                                 {"blocks.*.mlp.down", "rowwise"}, {"head", "colwise_rep"}};
  if (!sequence_parallel) return plan.add("wpe", "replicate");
  for (const char* region : {"wpe", "blocks.*.ln1", "blocks.*.ln2", "ln_f"}) {
    plan.add(region, "sequence_parallel");
  }
  return plan;
}

/// Data rank `rank`'s batch at `step`: tokens, their positions, next tokens; the same in every
/// run.
struct Batch {
  torch::Tensor tokens, positions, targets;
};
Batch batch(int64_t step, int64_t rank) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7919 * step + rank);
  auto tokens = torch::randint(kVocab, {kBatch, kSeq + 1}, generator);
  return {tokens.narrow(1, 0, kSeq), torch::arange(kSeq).expand({kBatch, kSeq}),
          tokens.narrow(1, 1, kSeq)};
}

torch::Tensor loss_of(Gpt& model, const Batch& b) {
  return torch::cross_entropy_loss(model(b.tokens, b.positions).reshape({-1, kVocab}),
                                   b.targets.reshape({-1}));
}

constexpr int64_t kSteps = 6;
constexpr double kClip = 0.5;

torch::optim::AdamW adamw(Gpt& model) {
  return torch::optim::AdamW(model->parameters(),
                             torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
}

/// How a run trains: the mesh, the strategy, micro-steps per optimizer step, precision.
struct Training {
  accel::ParallelismConfig mesh;
  std::string strategy = "NO_SHARD";
  int64_t accumulation = 1;
  std::string mixed_precision = "no";
  /// The tolerances: max|a - b| / max|b| per final tensor (none: not compared), and per
  /// step's total norm.
  std::optional<double> weights_tolerance = 1e-3;
  double norm_tolerance = 1e-4;
  /// The loss as a sum over this process's tokens, given with their count
  /// (backward(loss_sum, num_items)), in place of their mean.
  bool sum_over_tokens = false;
};

/// The program on plain LibTorch in one process over the global batches of `run` (every data
/// rank's, every micro-step's of an optimizer step): the final weights by name and each step's
/// total gradient norm.
std::pair<std::map<std::string, torch::Tensor>, std::vector<double>> reference(
    const Training& run, int64_t steps = kSteps) {
  torch::manual_seed(0);
  Gpt model;
  auto optimizer = adamw(model);
  std::vector<double> norms;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<torch::Tensor> tokens, positions, targets;
    for (int64_t micro = 0; micro < run.accumulation; ++micro) {
      for (int64_t r = 0; r < run.mesh.data_parallel_size(); ++r) {
        auto b = batch(step * run.accumulation + micro, r);
        tokens.push_back(b.tokens);
        positions.push_back(b.positions);
        targets.push_back(b.targets);
      }
    }
    optimizer.zero_grad();
    {
      at::autocast::set_autocast_enabled(at::kCPU, run.mixed_precision == "bf16");
      at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
      auto loss = loss_of(model, {torch::cat(tokens), torch::cat(positions), torch::cat(targets)});
      at::autocast::set_autocast_enabled(at::kCPU, false);
      at::autocast::clear_cache();
      loss.backward();
    }
    norms.push_back(torch::nn::utils::clip_grad_norm_(model->parameters(), kClip));
    optimizer.step();
  }
  std::map<std::string, torch::Tensor> weights;
  for (const auto& item : model->named_parameters()) weights[item.key()] = item.value().clone();
  return {weights, norms};
}

/// max|a - b| / max|b|.
double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

/// The counted live bytes once they are `expected`, or after a second whatever they are: a
/// collective's worker thread may drop its hold on a temporary (a flattened broadcast, a norm's
/// scalar) a moment after the collective has completed.
int64_t settled_bytes(const accel::util::CountingCpuAllocator& counted, int64_t expected) {
  for (int attempt = 0; attempt < 200 && counted.live_bytes() != expected; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return counted.live_bytes();
}

/// Trains Gpt as `run` says, clipping on every micro-step as real loops do, and compares it with
/// reference(): every optimizer step's total norm and every final tensor within the tolerances.
/// Checks too that the planned parameters are 1/tp of theirs on every process.
void expect_matches_one_process(const Training& run, const accel::TensorParallelPlan& plan) {
  SCOPED_TRACE(run.strategy + ", accumulation " + std::to_string(run.accumulation) + ", " +
               run.mixed_precision);
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .parallelism_config(run.mesh)
                                     .sharding_strategy(run.strategy)
                                     .gradient_accumulation_steps(run.accumulation)
                                     .mixed_precision(run.mixed_precision));
  const int64_t data_rank = accelerator.data_parallel_rank() * run.mesh.dp_shard_size() +
                            accelerator.data_parallel_shard_rank();
  // The bytes the model's tensors hold, counted by the allocator: after prepare, the slices'
  // only (the whole tensors freed), whatever the code believes it holds.
  std::optional<accel::util::CountingCpuAllocator> counted(std::in_place);
  torch::manual_seed(0);
  Gpt model;
  int64_t whole_numel = 0;
  for (const auto& p : model->parameters()) whole_numel += p.numel();
  EXPECT_EQ(counted->live_bytes(), 4 * whole_numel);
  accelerator.prepare(model, plan);
  const bool counts_exactly =
      run.strategy == "NO_SHARD" && run.mesh.data_parallel_size() * run.mesh.cp_size() == 1;
  int64_t held = 0;  // this process's elements of the parameters
  for (const auto& p : model->parameters()) held += p.numel();
  const int64_t prepared_bytes =
      counts_exactly ? settled_bytes(*counted, 4 * held) : counted->live_bytes();
  auto optimizer = accelerator.prepare(adamw(model));

  std::vector<double> norms;
  for (int64_t micro = 0; micro < kSteps * run.accumulation; ++micro) {
    auto b = batch(micro, data_rank);
    auto step = accelerator.accumulate(model);
    // Each cp process trains on its shard of the sequence (a no-op where cp_size is 1).
    auto scope =
        accelerator.maybe_context_parallel({&b.tokens, &b.positions, &b.targets}, {1, 1, 1});
    EXPECT_EQ(b.tokens.size(1), kSeq / run.mesh.cp_size());
    if (run.sum_over_tokens) {
      auto logits = model(b.tokens, b.positions).reshape({-1, kVocab});
      accelerator.backward(
          torch::nn::functional::cross_entropy(
              logits, b.targets.reshape({-1}),
              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)),
          b.targets.numel());
    } else {
      accelerator.backward(loss_of(model, b));
    }
    const double norm = accelerator.clip_grad_norm_(model->parameters(), kClip);
    if (accelerator.sync_gradients()) norms.push_back(norm);
    optimizer.step();
    optimizer.zero_grad();
  }
  // What the training left: the slices and AdamW's two moments (the gradients set to none), no
  // activation held past its step.
  const int64_t trained_bytes = counts_exactly && run.mixed_precision == "no"
                                    ? settled_bytes(*counted, 12 * held)
                                    : counted->live_bytes();
  counted.reset();
  const auto [expected, expected_norms] = reference(run);
  ASSERT_EQ(norms.size(), expected_norms.size());
  for (int64_t step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(norms[step], expected_norms[step], run.norm_tolerance * expected_norms[step])
        << "step " << step;
  }
  const auto whole = accelerator.get_state_dict(model);
  if (accelerator.is_main_process() && run.weights_tolerance) {
    ASSERT_EQ(whole.size(), expected.size());
    for (const auto& [name, value] : whole) {
      ASSERT_TRUE(expected.count(name)) << name;
      ASSERT_EQ(value.sizes(), expected.at(name).sizes()) << name;
      EXPECT_LT(relative_difference(value, expected.at(name)), *run.weights_tolerance) << name;
    }
  }
  // The planned parameters are this process's slices: 1/tp of theirs.
  int64_t planned_whole = 0, planned_held = 0;
  for (const auto& item : model->named_parameters()) {
    const auto& name = item.key();
    const bool replicated = name.rfind("wpe", 0) == 0 || name.find("ln") != std::string::npos ||
                            name.find("attn.o.bias") != std::string::npos ||
                            name.find("mlp.down.bias") != std::string::npos || name == "head.bias";
    if (!replicated) {
      planned_held += item.value().numel();
      planned_whole += expected.at(name).numel();
    }
  }
  EXPECT_EQ(planned_held * run.mesh.tp_size(), planned_whole);
  // Counted exactly where nothing else is allocated by prepare (a data-parallel group's gradient
  // buckets, sharding's flat buffers) or left by training (bf16 autocast's casts).
  if (counts_exactly) {
    EXPECT_EQ(prepared_bytes, 4 * held) << "bytes allocated after prepare; the parameters hold "
                                        << 4 * held << " of the whole model's " << 4 * whole_numel;
    if (run.mixed_precision == "no") {
      EXPECT_EQ(trained_bytes, 12 * held) << "bytes left after training";
    }
  }
  if (run.mesh.tp_enabled()) {
    EXPECT_LT(held, whole_numel);
  } else {
    EXPECT_EQ(held, whole_numel);
  }
}

TEST(TensorParallel, GptOverTheWholeJobMatchesOneProcess) {
  expect_matches_one_process({accel::ParallelismConfig().tp_size(world_size())}, gpt_plan());
}

// Accumulation (with clipping on every micro-step, as real loops do) and bf16 autocast, whose
// partial products are rounded to bf16 before they are summed over the group: every step's
// gradient norm within bf16's rounding of the same autocast on one process. Weights are not
// compared under bf16: AdamW moves a coordinate by the learning rate whichever side of zero its
// rounded gradient falls, so both runs' weights wander apart by up to the steps taken.
TEST(TensorParallel, GptWithAccumulationAndBf16MatchesOneProcess) {
  Training accumulated{accel::ParallelismConfig().tp_size(world_size())};
  accumulated.accumulation = 2;
  expect_matches_one_process(accumulated, gpt_plan());
  Training bf16{accel::ParallelismConfig().tp_size(world_size())};
  bf16.mixed_precision = "bf16";
  bf16.weights_tolerance = std::nullopt;
  bf16.norm_tolerance = 2e-2;
  expect_matches_one_process(bf16, gpt_plan());
}

TEST(TensorParallel, GptOnDataShardTimesTensorMatchesOneProcess) {
  ASSERT_EQ(world_size(), 4);
  Training run{accel::ParallelismConfig().dp_shard_size(2).tp_size(2)};
  run.accumulation = 2;
  expect_matches_one_process(run, gpt_plan());
}

// The slices' gradients (ZeRO-2) and optimizer state (ZeRO-1, ZeRO-2) sharded over dp_shard.
TEST(TensorParallel, GptWithShardedGradientsMatchesOneProcess) {
  ASSERT_EQ(world_size(), 4);
  Training run{accel::ParallelismConfig().dp_shard_size(2).tp_size(2), "SHARD_GRAD_OP"};
  run.accumulation = 2;
  expect_matches_one_process(run, gpt_plan());
}
// Megatron's sequence parallelism: LayerNorms and the position embedding's lookups run on the
// tp process's shard of the sequence; colwise inputs are all-gathered on it, rowwise outputs
// (and the vocabulary-parallel embedding's) reduce-scattered; the replicated parameters used on
// shards have their gradients summed over the group.
TEST(TensorParallel, GptWithSequenceParallelismMatchesOneProcess) {
  Training run{accel::ParallelismConfig().tp_size(world_size())};
  run.accumulation = 2;
  expect_matches_one_process(run, gpt_plan(/*sequence_parallel=*/true));
}

// The slices sharded again over dp_shard (FULL_SHARD, the default there): each process holds
// 1/(tp * dp_shard) of the planned parameters, gathered over dp_shard for the tensor-parallel
// operators.
TEST(TensorParallel, GptWithFullShardMatchesOneProcess) {
  ASSERT_EQ(world_size(), 4);
  Training run{accel::ParallelismConfig().dp_shard_size(2).tp_size(2), "FULL_SHARD"};
  run.accumulation = 2;
  expect_matches_one_process(run, gpt_plan());
}
TEST(TensorParallel, GptWithShardedOptimizerStateMatchesOneProcess) {
  ASSERT_EQ(world_size(), 4);
  expect_matches_one_process(
      {accel::ParallelismConfig().dp_shard_size(2).tp_size(2), "SHARD_OPTIMIZER_STATE"},
      gpt_plan());
}

// Weights leave a tensor-parallel run whole: save_model writes what get_state_dict gives, which
// the same model loads on one process. save_state refuses on every process (not yet supported).
// Context parallelism: ring attention over sequence shards, alone and beside tensor and sharded
// data parallelism.
TEST(ContextParallel, GptOverTheWholeJobMatchesOneProcess) {
  Training run{accel::ParallelismConfig().cp_size(world_size())};
  run.accumulation = 2;
  expect_matches_one_process(run, gpt_plan());
}
// The activations of a context-parallel forward and backward, counted by the allocator: each
// process's peak over its shard of a long sequence scales as 1/cp of the whole sequence's. The
// ring costs a constant factor over plain attention on as many tokens: its K/V and dK/dV travel
// double-buffered beside dQ and the block gradients (measured here: 1.58/cp on 2 processes,
// 1.73/cp on 4; keeping every K/V block that came by would pass 2/cp).
TEST(ContextParallel, ActivationsAreTheShardsCounted) {
  const int64_t cp = world_size();
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().parallelism_config(accel::ParallelismConfig().cp_size(cp)));
  constexpr int64_t kLong = 2048, kWidth = 64;
  torch::manual_seed(0);
  torch::nn::Linear qkv(kWidth, 3 * kWidth), out(kWidth, kWidth);
  accelerator.prepare(qkv);
  accelerator.prepare(out);
  accel::util::CountingCpuAllocator counted;
  auto peak = [&](bool shard) {
    auto x = torch::randn({2, kLong, kWidth});
    const int64_t before = counted.live_bytes();
    counted.reset_peak();
    {
      std::optional<accel::ContextParallelScope> scope;
      if (shard) scope.emplace(accelerator.maybe_context_parallel({&x}, {1}));
      auto parts = qkv(x).view({x.size(0), x.size(1), 3, kHeads, -1}).permute({2, 0, 3, 1, 4});
      auto y = accel::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, true);
      accelerator.backward(out(y.transpose(1, 2).reshape({x.size(0), x.size(1), -1})).sum());
    }
    for (auto* m : {&qkv, &out}) {
      for (auto& p : (*m)->parameters()) p.mutable_grad() = torch::Tensor();
    }
    return static_cast<double>(counted.peak_bytes() - before);
  };
  peak(false);  // the first backward also allocates what later ones reuse
  const double whole = peak(false), sharded = peak(true);
  std::cout << "activation peak over " << kLong / cp << " of " << kLong << " tokens: " << sharded
            << " bytes, over all of them " << whole << ": " << sharded / whole << "x\n";
  EXPECT_LT(sharded / whole, 1.8 / static_cast<double>(cp));
}

TEST(ContextParallel, GptOnTensorTimesContextMatchesOneProcess) {
  ASSERT_EQ(world_size(), 4);
  expect_matches_one_process({accel::ParallelismConfig().tp_size(2).cp_size(2)}, gpt_plan());
  // A loss summed over each shard's tokens and given with their count: divided by the tokens
  // of the data and cp processes, each counted once (a tp group's processes hold the same ones).
  Training summed{accel::ParallelismConfig().tp_size(2).cp_size(2)};
  summed.accumulation = 2;
  summed.sum_over_tokens = true;
  expect_matches_one_process(summed, gpt_plan());
}
TEST(ContextParallel, GptOnDataShardTimesContextMatchesOneProcess) {
  ASSERT_EQ(world_size(), 4);
  expect_matches_one_process(
      {accel::ParallelismConfig().dp_shard_size(2).cp_size(2), "SHARD_GRAD_OP"}, gpt_plan());
}

// HYBRID_SHARD over the mesh's data dimensions, on one machine: units sharded over dp_shard,
// replicated over dp_replicate (a mesh with no tp leaves the plan unapplied).
TEST(DeviceMesh, GptOnDataReplicateTimesDataShardMatchesOneProcess) {
  ASSERT_EQ(world_size(), 4);
  Training run{accel::ParallelismConfig().dp_replicate_size(2).dp_shard_size(2), "FULL_SHARD"};
  run.accumulation = 2;
  expect_matches_one_process(run, gpt_plan());
}

// Bad input under context parallelism: refused with a message, alike on every process.
TEST(ContextParallel, BadInputsAreRefusedNamingThem) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().parallelism_config(
      accel::ParallelismConfig().cp_size(world_size())));
  auto tokens = torch::zeros({2, 6}, torch::kLong);
  const auto before = tokens.clone();
  auto odd = [&] {
    try {
      auto scope = accelerator.maybe_context_parallel({&tokens}, {1});
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string();
  };
  if (6 % (2 * world_size()) != 0) {
    EXPECT_NE(odd().find("buffer 0 has a sequence of 6 along dimension 1, which 2 * cp_size = " +
                         std::to_string(2 * world_size()) + " does not divide"),
              std::string::npos);
    EXPECT_TRUE(torch::equal(tokens, before));
  }
  auto q = torch::randn({1, 2, 8, 4});
  auto k = q.clone(), v = q.clone();
  auto message = [&](auto attend) {
    auto scope = accelerator.maybe_context_parallel({&q, &k, &v}, {2, 2, 2});
    try {
      attend();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string();
  };
  EXPECT_NE(message([&] {
              accel::scaled_dot_product_attention(q, k, v, torch::ones({8, 8}, torch::kBool));
            }).find("under context parallelism takes no attn_mask"),
            std::string::npos);
  EXPECT_NE(message([&] {
              accel::scaled_dot_product_attention(q, k, v, {}, 0.1);
            }).find("takes no dropout (dropout_p 0.1)"),
            std::string::npos);
  // Outside the scope the buffers are whole again and attention is LibTorch's.
  EXPECT_EQ(q.size(2), 8);
  EXPECT_TRUE(torch::allclose(accel::scaled_dot_product_attention(q, k, v, {}, 0.0, true),
                              torch::scaled_dot_product_attention(q, k, v, {}, 0.0, true)));
}

TEST(TensorParallel, SaveModelWritesWholeTensors) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().parallelism_config(
      accel::ParallelismConfig().tp_size(world_size())));
  torch::manual_seed(0);
  Gpt model;
  accelerator.prepare(model, gpt_plan());
  const auto dir = std::filesystem::temp_directory_path() /
                   ("accel-tp-save-" + std::to_string(std::atoll(std::getenv("MASTER_PORT"))));
  accelerator.save_model(model, dir.string());
  const auto whole = accelerator.get_state_dict(model);
  if (accelerator.is_main_process()) {
    const auto saved = accel::load_safetensors((dir / "model.safetensors").string());
    ASSERT_EQ(saved.size(), whole.size());
    for (const auto& [name, value] : whole)
      EXPECT_TRUE(torch::equal(saved.at(name), value)) << name;
    // torch::manual_seed(0) built `model` first: its whole weights are a fresh Gpt's.
    torch::manual_seed(0);
    Gpt fresh;
    for (const auto& item : fresh->named_parameters()) {
      EXPECT_TRUE(torch::equal(saved.at(item.key()), item.value())) << item.key();
    }
  }
  accelerator.wait_for_everyone();
  if (accelerator.is_main_process()) std::filesystem::remove_all(dir);
}

// ---- checkpoints on any layout ------------------------------------------------------------

std::string env_or(const char* name, const std::string& otherwise) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : otherwise;
}

/// Every weight within 1e-5 of the one-process run's after `steps` steps (on the main process).
void expect_reference_weights(accel::Accelerator& accelerator, Gpt& model, int64_t steps,
                              const char* when) {
  const auto whole = accelerator.get_state_dict(model);
  if (!accelerator.is_main_process()) return;
  Training global{accel::ParallelismConfig().dp_shard_size(4)};
  const auto expected = reference(global, steps).first;
  ASSERT_EQ(whole.size(), expected.size());
  double largest = 0;
  for (const auto& [name, value] : whole) {
    const double difference = relative_difference(value, expected.at(name));
    largest = std::max(largest, difference);
    // Only rounding: the batches are the same and the state is carried whole (a state lost or
    // misplaced in a re-split moves weights by 3e-3 to 5e-2 in one step).
    EXPECT_LT(difference, 1e-5) << name << " " << when << " (" << steps << " steps)";
  }
  std::cout << "weights " << when << ", " << steps
            << " steps: largest max|a-b|/max|b| against one process " << largest << "\n";
}

// One run of a chain on different meshes (test/runtime/parallel/mesh_checkpoints.sh): the
// mesh comes from `accel launch --parallelism_config_*`; it loads ACCEL_TEST_LOAD (a checkpoint
// of another mesh) and trains optimizer steps [ACCEL_TEST_FROM, ACCEL_TEST_TO) of Gpt on the
// same global batches whatever the mesh (4 groups of rows per step, split among the data ranks),
// then saves ACCEL_TEST_SAVE; its weights after loading and at the end are the one-process
// run's. With ACCEL_TEST_WINDOW it saves after the first micro-step of a window of 2 instead;
// with ACCEL_TEST_REFUSAL, load_state (or, loading nothing, save_state) must refuse with that
// message on every process.
TEST(MeshCheckpoint, Stage) {
  const std::string from_text = env_or("ACCEL_TEST_FROM", "");
  if (from_text.empty()) GTEST_SKIP() << "a stage of mesh_checkpoints.sh";
  const int64_t from = std::stoll(from_text), to = std::stoll(env_or("ACCEL_TEST_TO", "0"));
  const std::string load = env_or("ACCEL_TEST_LOAD", ""), save = env_or("ACCEL_TEST_SAVE", "");
  const std::string refusal = env_or("ACCEL_TEST_REFUSAL", "");
  const bool window = !env_or("ACCEL_TEST_WINDOW", "").empty();
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().gradient_accumulation_steps(window ? 2 : 1));
  const auto& mesh = accelerator.parallelism_config();
  const int64_t data_size = mesh ? mesh->data_parallel_size() : 1;
  const int64_t data_rank = mesh ? accelerator.data_parallel_rank() * mesh->dp_shard_size() +
                                       accelerator.data_parallel_shard_rank()
                                 : 0;
  torch::manual_seed(0);
  Gpt model;
  accelerator.prepare(model, gpt_plan());
  auto optimizer = accelerator.prepare(adamw(model));
  if (!refusal.empty()) {
    try {
      if (!load.empty()) {
        accelerator.load_state(load);
      } else {
        accelerator.save_state(save);
      }
      FAIL() << "the checkpoint call was accepted";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find(refusal), std::string::npos)
          << e.what_without_backtrace();
    }
    return;
  }
  if (!load.empty()) {
    accelerator.load_state(load);
    expect_reference_weights(accelerator, model, from, "as loaded");
  }
  const int64_t groups = 4 / data_size;
  for (int64_t step = from; step < to; ++step) {
    std::vector<torch::Tensor> tokens, positions, targets;
    for (int64_t q = data_rank * groups; q < (data_rank + 1) * groups; ++q) {
      auto b = batch(step, q);
      tokens.push_back(b.tokens);
      positions.push_back(b.positions);
      targets.push_back(b.targets);
    }
    Batch b{torch::cat(tokens), torch::cat(positions), torch::cat(targets)};
    auto scope =
        accelerator.maybe_context_parallel({&b.tokens, &b.positions, &b.targets}, {1, 1, 1});
    auto accumulating = accelerator.accumulate(model);
    accelerator.backward(loss_of(model, b));
    accelerator.clip_grad_norm_(model->parameters(), kClip);
    optimizer.step();
    optimizer.zero_grad();
    if (window) break;  // saved inside the window
  }
  if (!save.empty()) accelerator.save_state(save);
  if (!window) expect_reference_weights(accelerator, model, to, "after training");
}

TEST(DeviceMesh, RanksFollowAccelerateOrder) {
  ASSERT_EQ(world_size(), 4);
  accel::Accelerator accelerator(
      accel::AcceleratorOptions()
          .parallelism_config(accel::ParallelismConfig().dp_shard_size(2).tp_size(2))
          .sharding_strategy("NO_SHARD"));
  const int64_t rank = accelerator.process_index();
  // tp innermost: ranks 0,1 are one tp group, 2,3 the other.
  EXPECT_EQ(accelerator.tensor_parallel_rank(), rank % 2);
  EXPECT_EQ(accelerator.data_parallel_shard_rank(), rank / 2);
  EXPECT_EQ(accelerator.data_parallel_rank(), 0);
  EXPECT_EQ(accelerator.context_parallel_rank(), 0);
  EXPECT_EQ(accelerator.pipeline_parallel_rank(), 0);
  // A prepared loader gives the processes of one data rank the same batches, and the two data
  // ranks different ones.
  auto dataset = torch::data::datasets::TensorDataset(torch::arange(16).view({16, 1}))
                     .map(torch::data::transforms::Stack<torch::data::TensorExample>());
  auto loader =
      accelerator.prepare(torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
          std::move(dataset), 4));
  std::vector<torch::Tensor> seen;
  for (auto& b : *loader) seen.push_back(b.data.flatten());
  const auto all = accelerator.gather(torch::cat(seen)).view({4, -1});
  EXPECT_TRUE(torch::equal(all[0], all[1]));
  EXPECT_TRUE(torch::equal(all[2], all[3]));
  EXPECT_FALSE(torch::equal(all[0], all[2]));
  // gather_for_metrics counts each sample once: gathered over the two data ranks, not the four
  // processes, and the last batch's repeated samples dropped (10 samples in batches of 2 per
  // data rank: the third round holds 2 of 4).
  auto eval_set = torch::data::datasets::TensorDataset(torch::arange(10).view({10, 1}))
                      .map(torch::data::transforms::Stack<torch::data::TensorExample>());
  auto eval_loader =
      accelerator.prepare(torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
          std::move(eval_set), 2));
  std::vector<torch::Tensor> gathered;
  std::vector<int64_t> objects;
  for (auto& b : *eval_loader) {
    gathered.push_back(accelerator.gather_for_metrics(b.data.flatten()));
    const auto ids = b.data.flatten();
    objects = accelerator.gather_for_metrics(
        std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel()));
  }
  const auto samples = std::get<0>(torch::sort(torch::cat(gathered)));
  EXPECT_TRUE(torch::equal(samples, torch::arange(10))) << samples;
  EXPECT_EQ(objects.size(), 2u);
}

TEST(TensorParallel, SizesTheGroupDoesNotDivideAreRefusedOnEveryProcess) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().parallelism_config(
      accel::ParallelismConfig().tp_size(world_size())));
  torch::nn::Sequential model(torch::nn::Linear(4, 7), torch::nn::Linear(7, 3));
  try {
    accelerator.prepare(model, accel::TensorParallelPlan{{"0", "colwise"}, {"1", "rowwise"}});
    FAIL() << "a split tp_size does not divide was accepted";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find("'0' colwise over tp_size " + std::to_string(world_size()) +
                           ", which does not divide its out_features (7)"),
              std::string::npos)
        << message;
  }
  // Nothing was split: the model is whole on every process.
  EXPECT_EQ(model[0]->as<torch::nn::Linear>()->weight.size(0), 7);
}

}  // namespace
