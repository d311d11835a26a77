// Sharded data parallel (ZeRO-1: SHARD_OPTIMIZER_STATE, ZeRO-2: SHARD_GRAD_OP, ZeRO-3:
// FULL_SHARD, and HYBRID_SHARD) against plain data parallel (NO_SHARD). Run on 2 and on 4
// processes by `accel launch`, and on 4 processes as 2 machines of 2 by two launchers on this host
// (see test/CMakeLists.txt): every rank runs every test in the same order and checks its own side.
// Collectives go over Gloo. HYBRID_SHARD runs where the job spans machines.

#include <accel/accel.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "distributed/distributed_state.h"
#include "sharding/optimizer_shards.h"
#include "sharding/sharded_parameter.h"
#include "support/sharded_training.h"

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

int64_t rank() { return std::atoll(std::getenv("RANK")); }
int64_t world_size() { return std::atoll(std::getenv("WORLD_SIZE")); }
int64_t processes_per_machine() { return std::atoll(std::getenv("LOCAL_WORLD_SIZE")); }
int64_t machines() { return world_size() / processes_per_machine(); }

/// Every sharding strategy this job can run: HYBRID_SHARD needs two machines or more.
std::vector<std::string> sharded_strategies() {
  std::vector<std::string> strategies = {"SHARD_OPTIMIZER_STATE", "SHARD_GRAD_OP", "FULL_SHARD"};
  if (machines() > 1) strategies.push_back("HYBRID_SHARD");
  return strategies;
}
/// The strategies that shard the parameters too.
std::vector<std::string> parameter_sharding_strategies() {
  std::vector<std::string> strategies = {"FULL_SHARD"};
  if (machines() > 1) strategies.push_back("HYBRID_SHARD");
  return strategies;
}
bool shards_parameters(const std::string& strategy) {
  return strategy == "FULL_SHARD" || strategy == "HYBRID_SHARD";
}
/// How many processes share out the shards: one machine's under HYBRID_SHARD.
int64_t shard_count(const std::string& strategy) {
  return strategy == "HYBRID_SHARD" ? processes_per_machine() : world_size();
}

/// An MLP whose parameter counts (per group below: 5*7 + 7 + 7*3 = 63, and 3 + 3*1 + 1 = 7 with
/// the head) divide by neither 2 nor 4, so shards end in padding.
struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t width = 7) {
    hidden = register_module("hidden", torch::nn::Linear(5, width));
    middle = register_module("middle", torch::nn::Linear(width, 3));
    head = register_module("head", torch::nn::Linear(3, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return head(torch::tanh(middle(torch::tanh(hidden(x)))));
  }
  torch::nn::Linear hidden{nullptr}, middle{nullptr}, head{nullptr};
};
TORCH_MODULE(Net);

/// This process's batch for micro-step `step`: different on every process, the same in every run.
std::pair<torch::Tensor, torch::Tensor> batch(int64_t step) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * step + rank());
  auto x = torch::randn({8, 5}, generator);
  auto y = torch::sin(x.sum(1, true)) + 0.1 * torch::randn({8, 1}, generator);
  return {x, y};
}

/// One parameter group holding every parameter.
std::vector<torch::optim::OptimizerParamGroup> groups_of_one(Net& net) {
  std::vector<torch::optim::OptimizerParamGroup> out;
  out.emplace_back(net->parameters());
  return out;
}

/// Two parameter groups with their own learning rates: the body and the head.
std::vector<torch::optim::OptimizerParamGroup> groups(Net& net) {
  std::vector<torch::Tensor> body;
  for (auto& p : net->hidden->parameters()) body.push_back(p);
  for (auto& p : net->middle->parameters()) body.push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> out;
  out.emplace_back(body, std::make_unique<torch::optim::AdamWOptions>(
                             torch::optim::AdamWOptions(3e-2).weight_decay(0.1)));
  out.emplace_back(net->head->parameters(), std::make_unique<torch::optim::AdamWOptions>(1e-2));
  return out;
}

using accel_test::weights;
using accel_test::worst_difference;

/// A training run on batch(): `micro_steps` micro-steps from `first_step`, accumulation 2 (the
/// Accelerator's setting), clipping at 0.5.
template <typename Optimizer>
void train(accel::Accelerator& accelerator, Net& net, Optimizer& optimizer, int64_t first_step,
           int64_t micro_steps, accel_test::Clip clip = accel_test::Clip::norm_when_synchronising) {
  accel_test::train_clipped(accelerator, net, optimizer, first_step, micro_steps, batch, clip);
}

/// True when `a` and `b` share memory.
bool same_memory(const torch::Tensor& a, const torch::Tensor& b) {
  return a.storage().is_alias_of(b.storage());
}

/// 20 optimizer steps (40 micro-steps) of `strategy`, from the same initial weights everywhere.
/// With `offload`, also checks that the optimizer's parameters and state are host tensors of
/// their own.
std::vector<torch::Tensor> trained_weights(
    const std::string& strategy, const std::vector<std::string>& units = {},
    const std::string& mixed_precision = "no", std::optional<int64_t> min_num_params = std::nullopt,
    bool offload = false, accel_test::Clip clip = accel_test::Clip::norm_when_synchronising) {
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .mixed_precision(mixed_precision)
                                     // Reduced in fp32 as NO_SHARD does: the same training.
                                     .fsdp_reduce_dtype("fp32")
                                     .gradient_accumulation_steps(2)
                                     .sharding_strategy(strategy)
                                     .fsdp_transformer_layer_cls_to_wrap(units)
                                     .fsdp_min_num_params(min_num_params)
                                     .fsdp_offload_params(offload));
  torch::manual_seed(7);
  Net net;
  accelerator.prepare(net);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
  // Sharded, the optimizer holds one flat slice per group, not the model's parameters.
  EXPECT_EQ(accel::sharding::shards_of(optimizer) != nullptr, strategy != "NO_SHARD") << strategy;
  if (units.empty() && !min_num_params) {
    EXPECT_EQ(optimizer.param_groups()[0].params().size(), strategy == "NO_SHARD" ? 4u : 1u);
  }
  if (min_num_params && shards_parameters(strategy)) {
    // By size, 30: the first layer (42 parameters) is a unit, the middle one (24) is not: the body
    // group holds two units, the head's group one.
    EXPECT_EQ(optimizer.param_groups()[0].params().size(), 2u);
    EXPECT_EQ(optimizer.param_groups()[1].params().size(), 1u);
  }
  // FULL_SHARD: the model's parameters hold nothing themselves.
  for (const auto& p : net->parameters()) {
    EXPECT_EQ(accel::sharding::is_sharded(p), shards_parameters(strategy)) << strategy;
  }
  if (offload) {
    EXPECT_TRUE(accel::sharding::shards_of(optimizer)->offloads_to_host()) << strategy;
    // The shards are copies in host memory, not slices of the buffer the parameters live in (the
    // parameters stay on the device; here both are the CPU).
    for (const auto& group : optimizer.param_groups()) {
      for (const auto& shard : group.params()) {
        EXPECT_TRUE(shard.device().is_cpu()) << strategy;
        for (const auto& p : net->parameters()) {
          if (!accel::sharding::is_sharded(p)) {
            EXPECT_FALSE(same_memory(shard, p)) << strategy;
          }
        }
      }
    }
  }
  train(accelerator, net, optimizer, 0, 40, clip);
  if (offload) {
    accel_test::for_each_optimizer_tensor(optimizer, [&](const torch::Tensor& t) {
      if (t.defined()) {
        EXPECT_TRUE(t.device().is_cpu()) << strategy;
      }
    });
  }
  return weights(net);
}

/// How a program trains two models in turn: Accelerate's accumulate (accumulation 2),
/// accumulate_until on the program's own count (`(i + 1) % 3 == 0`, as accel-migrate writes a
/// hand-written accumulation), or no_sync held by hand on the micro-steps that do not step.
enum class TurnLoop { accumulate, accumulate_until, no_sync };
constexpr int64_t kTurnMicroSteps = 6;  // per model and epoch: windows of 2 or 3, none carried
int64_t turn_window(TurnLoop loop) { return loop == TurnLoop::accumulate ? 2 : 3; }

/// Model `which`'s batch at micro-step `step` on process `process`.
std::pair<torch::Tensor, torch::Tensor> turn_batch(int which, int64_t step, int64_t process) {
  auto generator =
      at::make_generator<at::CPUGeneratorImpl>(100000 * (which + 1) + 1000 * step + process);
  auto x = torch::randn({8, 5}, generator);
  auto y = torch::sin(x.sum(1, true)) + 0.1 * torch::randn({8, 1}, generator);
  return {x, y};
}

/// Two models (7 and 6 wide), each with its AdamW, trained in turn: an epoch of one, then an
/// epoch of the other, twice. `train(which, net, optimizer, i, step)` runs one micro-step.
template <typename Optimizer, typename MicroStep>
std::vector<torch::Tensor> train_in_turn(Net& first, Net& second, Optimizer& first_optimizer,
                                         Optimizer& second_optimizer, const MicroStep& micro) {
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int which = 0; which < 2; ++which) {
      for (int64_t i = 0; i < kTurnMicroSteps; ++i) {
        micro(which, which == 0 ? first : second, which == 0 ? first_optimizer : second_optimizer,
              i, epoch * kTurnMicroSteps + i);
      }
    }
  }
  auto out = weights(first);
  for (auto& w : weights(second)) out.push_back(w);
  return out;
}

/// The job's weights after two models were trained in turn by `loop` under `strategy`.
std::vector<torch::Tensor> trained_in_turn(const std::string& strategy, TurnLoop loop) {
  accel::Accelerator accelerator(
      accel::AcceleratorOptions()
          .cpu(true)
          .fsdp_reduce_dtype("fp32")
          .gradient_accumulation_steps(loop == TurnLoop::accumulate ? 2 : 1)
          .sharding_strategy(strategy));
  torch::manual_seed(7);
  Net first(7), second(6);
  accelerator.prepare(first);
  accelerator.prepare(second);
  using torch::optim::AdamW;
  auto first_optimizer = accelerator.prepare(AdamW(first->parameters(), 1e-2));
  auto second_optimizer = accelerator.prepare(AdamW(second->parameters(), 1e-2));
  const int64_t window = turn_window(loop);
  return train_in_turn(first, second, first_optimizer, second_optimizer,
                       [&](int which, Net& net, auto& optimizer, int64_t i, int64_t step) {
                         auto [x, y] = turn_batch(which, step, rank());
                         const bool last = (i + 1) % window == 0;
                         auto loss = [&] { return torch::mse_loss(net->forward(x), y); };
                         if (loop == TurnLoop::accumulate) {
                           auto scope = accelerator.accumulate(net);
                           accelerator.backward(loss());
                           optimizer.step();
                           optimizer.zero_grad();
                           return;
                         }
                         if (loop == TurnLoop::accumulate_until) {
                           auto scope = accelerator.accumulate_until(last, net);
                           accelerator.backward(loss());
                         } else if (!last) {
                           auto scope = accelerator.no_sync(net);
                           accelerator.backward(loss());
                         } else {
                           accelerator.backward(loss());
                         }
                         if (last) {
                           optimizer.step();
                           optimizer.zero_grad();
                         }
                       });
}

/// The same program on one process with every process's batches at once, plain LibTorch.
std::vector<torch::Tensor> plain_in_turn(TurnLoop loop) {
  torch::manual_seed(7);
  Net first(7), second(6);
  using torch::optim::AdamW;
  AdamW first_optimizer(first->parameters(), 1e-2), second_optimizer(second->parameters(), 1e-2);
  const int64_t window = turn_window(loop);
  return train_in_turn(first, second, first_optimizer, second_optimizer,
                       [&](int which, Net& net, auto& optimizer, int64_t i, int64_t step) {
                         std::vector<torch::Tensor> xs, ys;
                         for (int64_t process = 0; process < world_size(); ++process) {
                           auto [x, y] = turn_batch(which, step, process);
                           xs.push_back(x);
                           ys.push_back(y);
                         }
                         auto loss = torch::mse_loss(net->forward(torch::cat(xs)), torch::cat(ys));
                         // Accelerate's accumulate divides by its steps; the program's own
                         // count (accumulate_until, no_sync) sums.
                         if (loop == TurnLoop::accumulate) loss = loss / window;
                         loss.backward();
                         if ((i + 1) % window == 0) {
                           optimizer.step();
                           optimizer.zero_grad();
                         }
                       });
}

class Sharding : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GE(world_size(), 2) << "run me with accel launch --num_processes 2 (or 4)";
  }
};

TEST_F(Sharding, EveryStrategyTrainsAsDataParallel) {
  const auto reference = trained_weights("NO_SHARD");
  for (const auto& strategy : sharded_strategies()) {
    const auto sharded = trained_weights(strategy);
    const double difference = worst_difference(sharded, reference);
    EXPECT_LE(difference, 1e-6) << strategy;
    if (rank() == 0)
      std::printf("%s: largest weight difference %.3g\n", strategy.c_str(), difference);
    // And the run did train: the weights moved from their start.
    torch::manual_seed(7);
    Net start;
    EXPECT_GT(worst_difference(sharded, weights(start)), 1e-2) << strategy;
  }
  const auto bf16_reference = trained_weights("NO_SHARD", {}, "bf16");
  for (const auto& strategy : parameter_sharding_strategies()) {
    // With a unit per Linear (the wrap policy by class name): body 2 units, head 1.
    const auto by_class = trained_weights(strategy, {"Linear"});
    EXPECT_LE(worst_difference(by_class, reference), 1e-6) << strategy;
    // With units by size (FSDP's size-based policy).
    const auto by_size = trained_weights(strategy, {}, "no", 30);
    EXPECT_LE(worst_difference(by_size, reference), 1e-6) << strategy;
    // Under bf16 autocast, the casts of sharded parameters are lazy too; the same training.
    const auto bf16 = trained_weights(strategy, {"Linear"}, "bf16");
    const double bf16_difference = worst_difference(bf16, bf16_reference);
    EXPECT_LE(bf16_difference, 1e-6) << strategy;
    if (rank() == 0) {
      std::printf("%s bf16: largest weight difference %.3g\n", strategy.c_str(), bf16_difference);
    }
  }
}

// Two models with their own optimizers, trained in turn (an epoch of one, then of the other):
// each backward synchronises the models its loss reaches and no scope holds in no_sync, never
// the other one, so accumulate, accumulate_until and a hand-held no_sync train as one process
// does on every process's batches, under every strategy.
TEST_F(Sharding, TwoModelsTrainedInTurnSynchroniseOnlyTheirOwn) {
  std::vector<std::string> strategies = {"NO_SHARD"};
  for (const auto& s : sharded_strategies()) strategies.push_back(s);
  for (const auto loop : {TurnLoop::accumulate, TurnLoop::accumulate_until, TurnLoop::no_sync}) {
    const auto reference = plain_in_turn(loop);
    for (const auto& strategy : strategies) {
      SCOPED_TRACE(strategy + ", loop " + std::to_string(static_cast<int>(loop)));
      std::vector<torch::Tensor> trained;
      ASSERT_NO_THROW(trained = trained_in_turn(strategy, loop));
      EXPECT_LE(worst_difference(trained, reference), 1e-6);
    }
  }
}

// One clipping rule: a loop that clips on every micro-step, not only on synchronising ones, gives
// every strategy the weights of NO_SHARD, and those of the loop that clips when synchronising
// (clipping applies to the synchronised gradient; see Accelerator::clip_grad_norm_).
TEST_F(Sharding, ClippingOnEveryMicroStepIsOneRuleForEveryStrategy) {
  using accel_test::Clip;
  const auto guarded = trained_weights("NO_SHARD");
  const auto reference =
      trained_weights("NO_SHARD", {}, "no", std::nullopt, false, Clip::norm_every_micro_step);
  EXPECT_EQ(worst_difference(reference, guarded), 0.0);
  const auto value_reference =
      trained_weights("NO_SHARD", {}, "no", std::nullopt, false, Clip::value_every_micro_step);
  // Clipping by value at 0.05 does change this training.
  EXPECT_GT(worst_difference(value_reference, guarded), 1e-3);
  auto sum_of = [](const std::vector<torch::Tensor>& tensors) {
    double sum = 0;
    for (const auto& t : tensors) sum += t.sum().item<double>();
    return sum;
  };
  if (rank() == 0) {
    std::printf("NO_SHARD, clipping every micro-step: sum of all weights %.6f\n",
                sum_of(reference));
  }
  for (const auto& strategy : sharded_strategies()) {
    const auto norm =
        trained_weights(strategy, {}, "no", std::nullopt, false, Clip::norm_every_micro_step);
    const auto value =
        trained_weights(strategy, {}, "no", std::nullopt, false, Clip::value_every_micro_step);
    const double norm_difference = worst_difference(norm, reference);
    const double value_difference = worst_difference(value, value_reference);
    EXPECT_LE(norm_difference, 1e-5) << strategy;
    EXPECT_LE(value_difference, 1e-5) << strategy;
    if (rank() == 0) {
      std::printf(
          "%s, clipping every micro-step: sum of all weights %.6f, largest weight difference "
          "from NO_SHARD %.3g (norm), %.3g (value)\n",
          strategy.c_str(), sum_of(norm), norm_difference, value_difference);
    }
  }
}

TEST_F(Sharding, CpuOffloadTrainsAsDataParallel) {
  // The shards step in host memory: each step copies the reduced slices there and the updated
  // shards back into the parameters. A copy left out leaves the weights where they started.
  const auto reference = trained_weights("NO_SHARD");
  for (const auto& strategy : sharded_strategies()) {
    const auto offloaded = trained_weights(strategy, {}, "no", std::nullopt, /*offload=*/true);
    const double difference = worst_difference(offloaded, reference);
    EXPECT_LE(difference, 1e-6) << strategy;
    if (rank() == 0) {
      std::printf("%s, CPU offload: largest weight difference %.3g\n", strategy.c_str(),
                  difference);
    }
  }
  // FULL_SHARD gathers each unit from host shards, under bf16 autocast too.
  const auto bf16_reference = trained_weights("NO_SHARD", {}, "bf16");
  for (const auto& strategy : parameter_sharding_strategies()) {
    const auto bf16 = trained_weights(strategy, {"Linear"}, "bf16", std::nullopt, true);
    EXPECT_LE(worst_difference(bf16, bf16_reference), 1e-6) << strategy;
  }
}

/// The bytes of gathered units alive, once they reach `expected` or 5 s have passed: Gloo's
/// worker thread lets go of a collective's tensors a moment after the collective completes.
int64_t alive_bytes_once_settled(const accel::sharding::OptimizerShards& shards, int64_t expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int64_t alive = shards.gather_statistics().alive_bytes;
  while (alive != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    alive = shards.gather_statistics().alive_bytes;
  }
  return alive;
}

TEST_F(Sharding, FullShardGathersEachUnitForItsOperatorsAndFreesIt) {
  accel::Accelerator accelerator(
      accel::AcceleratorOptions()
          .cpu(true)
          .sharding_strategy("FULL_SHARD")
          .fsdp_transformer_layer_cls_to_wrap({"torch::nn::LinearImpl"}));
  torch::manual_seed(4);
  Net net;
  Net reference;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < net->parameters().size(); ++i)
      reference->parameters()[i].copy_(net->parameters()[i]);
  }
  accelerator.prepare(net);
  auto optimizer = accelerator.prepare(torch::optim::SGD(groups_of_one(net), 0.1));
  // One shard per Linear, each 1/N of its weight and bias (rounded up).
  ASSERT_EQ(optimizer.param_groups().size(), 1u);
  const auto& shards = optimizer.param_groups()[0].params();
  ASSERT_EQ(shards.size(), 3u);
  const int64_t n = world_size();
  EXPECT_EQ(shards[0].numel(), (5 * 7 + 7 + n - 1) / n);
  EXPECT_EQ(shards[2].numel(), (3 + 1 + n - 1) / n);
  // Forward gives what the unsharded model gives (training equivalence is tested above).
  auto [x, y] = batch(0);
  auto expected_loss = torch::mse_loss(reference->forward(x), y);
  auto& gathers = *accel::sharding::shards_of(optimizer);
  auto loss = torch::mse_loss(net->forward(x), y);
  EXPECT_NEAR(loss.item<double>(), expected_loss.item<double>(), 1e-6);
  // Forward gathered each unit once, and what autograd saved for backward holds none of them:
  // once the units left whole are dropped, no gathered bytes are alive.
  EXPECT_EQ(gathers.gather_statistics().gathers, 3);
  gathers.gather_parameters();
  EXPECT_EQ(alive_bytes_once_settled(gathers, 0), 0);
  // Backward gathers what its formulas need again: the head's and the middle layer's weights
  // (the first layer's is not needed: x takes no gradient).
  accelerator.backward(loss);
  EXPECT_EQ(gathers.gather_statistics().gathers, 5);
  const int64_t middle_and_head = (21 + 3 + n - 1) / n * n + (3 + 1 + n - 1) / n * n;
  EXPECT_EQ(alive_bytes_once_settled(gathers, middle_and_head * 4), middle_and_head * 4);
  // Reading a parameter (collective, on every process) gives its whole value.
  EXPECT_TRUE(torch::equal(net->hidden->weight.detach().clone(), reference->hidden->weight));
  optimizer.step();
  EXPECT_EQ(alive_bytes_once_settled(gathers, 0), 0);
  // In-place writes reach the shards: copy_ into a parameter, or any operator, then read back.
  const auto middle_bias = net->middle->bias.detach().clone();
  {
    torch::NoGradGuard no_grad;
    net->head->bias.copy_(torch::full({1}, 0.25));
    net->middle->bias.mul_(2);
  }
  EXPECT_EQ(net->head->bias.detach().clone().item<float>(), 0.25f);
  EXPECT_TRUE(torch::equal(net->middle->bias.detach().clone(), 2 * middle_bias));
  // A write into a view of a sharded parameter cannot be kept: refused, by name.
  try {
    torch::NoGradGuard no_grad;
    net->hidden->weight.t().zero_();
    ADD_FAILURE() << "a write into a view of a sharded parameter was accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("writes into a view of a sharded parameter"),
              std::string::npos)
        << error.what();
  }
}

TEST_F(Sharding, OptimizerStateAndGradientsAreOneNthPerProcess) {
  // Large enough that the shards' padding is negligible.
  auto measure = [](const std::string& strategy) {
    accel::Accelerator accelerator(
        accel::AcceleratorOptions().cpu(true).sharding_strategy(strategy));
    torch::manual_seed(3);
    Net net(512);
    accelerator.prepare(net);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(net->parameters(), {}));
    auto [x, y] = batch(0);
    accelerator.backward(torch::mse_loss(net->forward(x), y));
    // Between backward and the step: what each process holds of the gradients, on the model's
    // parameters and on the optimizer's (the shards, when sharded; the same tensors otherwise).
    std::vector<torch::Tensor> held = net->parameters();
    for (const auto& group : optimizer.param_groups()) {
      for (const auto& p : group.params()) {
        const bool counted = std::any_of(held.begin(), held.end(),
                                         [&](const torch::Tensor& q) { return q.is_same(p); });
        if (!counted) held.push_back(p);
      }
    }
    int64_t gradient_bytes = 0;
    for (const auto& p : held) {
      if (p.grad().defined()) gradient_bytes += p.grad().nbytes();
    }
    // No second copy of the parameters: the shard is a slice of the buffer they live in (with
    // FULL_SHARD, that buffer is gone: the parameters have none).
    const auto& stepped = optimizer.param_groups()[0].params()[0];
    if (!shards_parameters(strategy)) {
      EXPECT_TRUE(stepped.storage().is_alias_of(net->parameters()[0].storage())) << strategy;
    }
    optimizer.step();
    int64_t state_bytes = 0;
    for (const auto& entry : optimizer.state()) {
      const auto& state = static_cast<const torch::optim::AdamWParamState&>(*entry.second);
      state_bytes += state.exp_avg().nbytes() + state.exp_avg_sq().nbytes();
    }
    return std::make_pair(gradient_bytes, state_bytes);
  };
  const auto [full_gradients, full_state] = measure("NO_SHARD");
  for (const auto& strategy : sharded_strategies()) {
    const double n = static_cast<double>(shard_count(strategy));
    const auto [gradients, state] = measure(strategy);
    EXPECT_NEAR(state / (full_state / n), 1.0, 0.01) << strategy << ": " << state << " bytes";
    // Both strategies keep only the averaged slice once backward is through.
    EXPECT_NEAR(gradients / (full_gradients / n), 1.0, 0.01)
        << strategy << ": " << gradients << " bytes";
  }
}

/// An MLP of 16 layers of 256 x 256 (1.05M parameters).
struct DeepNetImpl : torch::nn::Module {
  DeepNetImpl() {
    for (int i = 0; i < 16; ++i) layers->push_back(torch::nn::Linear(256, 256));
    register_module("layers", layers);
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& layer : *layers) x = torch::tanh(layer->as<torch::nn::Linear>()->forward(x));
    return x.sum(1, true);
  }
  torch::nn::ModuleList layers;
};
TORCH_MODULE(DeepNet);

/// Bytes of the distinct storages behind the model's parameters and gradients and the
/// optimizer's parameters, gradients and Adam state (views of one buffer counted once).
int64_t held_bytes(DeepNet& net, const torch::optim::AdamW& optimizer) {
  std::map<const void*, int64_t> storages;
  auto count = [&](const torch::Tensor& t) {
    // A sharded parameter (FULL_SHARD) holds no bytes: its shard is the optimizer's.
    if (t.defined() && !accel::sharding::is_sharded(t)) {
      storages[t.storage().data()] = t.storage().nbytes();
    }
  };
  for (const auto& p : net->parameters()) {
    count(p);
    count(p.grad());
  }
  accel_test::for_each_optimizer_tensor(optimizer, count);
  int64_t bytes = 0;
  for (const auto& entry : storages) bytes += entry.second;
  return bytes;
}

/// A DeepNet prepared with `options`, its prepared AdamW, and one step taken: weights, gradients
/// and Adam state all exist.
struct SteppedDeepNet {
  explicit SteppedDeepNet(const accel::AcceleratorOptions& options)
      : accelerator(options),
        net(prepared_net(accelerator)),
        optimizer(accelerator.prepare(torch::optim::AdamW(net->parameters(), {}))) {
    for (const auto& p : net->parameters()) parameters += p.numel();
    accelerator.backward(loss());
    optimizer.step();
  }
  static DeepNet prepared_net(accel::Accelerator& accelerator) {
    torch::manual_seed(5);
    DeepNet net;
    accelerator.prepare(net);
    return net;
  }
  torch::Tensor loss() { return torch::mse_loss(net->forward(x), torch::ones({4, 1})); }

  accel::Accelerator accelerator;
  DeepNet net;
  accel::AcceleratedOptimizer<torch::optim::AdamW> optimizer;
  torch::Tensor x = torch::randn({4, 256});
  int64_t parameters = 0;
};

TEST_F(Sharding, HeldBytesAgreeWithEstimateMemory) {
  // accel estimate-memory's fp32 columns, per process (P parameters, 4 bytes each):
  // train DP 16P; stage 1 (SHARD_OPTIMIZER_STATE) 4P of weights, 4P of whole gradients and 8P
  // of Adam state / N; stage 2 (SHARD_GRAD_OP) 4P of weights and (4P of gradients + 8P of Adam
  // state) / N; stage 3 (FULL_SHARD) all of it / N; HYBRID_SHARD is stage 3 over one machine's
  // processes.
  const double n = static_cast<double>(world_size());
  std::vector<std::pair<std::string, double>> estimates = {{"NO_SHARD", 16.0},
                                                           {"SHARD_OPTIMIZER_STATE", 8 + 8 / n},
                                                           {"SHARD_GRAD_OP", 4 + 12 / n},
                                                           {"FULL_SHARD", 16 / n}};
  if (machines() > 1) {
    estimates.emplace_back("HYBRID_SHARD", 16.0 / static_cast<double>(processes_per_machine()));
  }
  for (const auto& [strategy, estimate_per_parameter] : estimates) {
    SteppedDeepNet run(accel::AcceleratorOptions().cpu(true).sharding_strategy(strategy));
    if (strategy == "SHARD_OPTIMIZER_STATE") {
      // ZeRO-1 cuts the whole gradients down to this process's slice as soon as backward has
      // all-reduced them; its peak, which the estimate describes, is while they are whole, as
      // after a backward that does not synchronise (an accumulation micro-step).
      run.optimizer.zero_grad();
      auto skip = run.accelerator.no_sync(run.net);
      run.accelerator.backward(run.loss());
    }
    const double held = static_cast<double>(held_bytes(run.net, run.optimizer));
    const double estimate = estimate_per_parameter * static_cast<double>(run.parameters);
    if (rank() == 0) {
      std::printf("%s on %d processes: %.0f bytes held per process, estimate %.0f\n",
                  strategy.c_str(), static_cast<int>(world_size()), held, estimate);
    }
    EXPECT_NEAR(held / estimate, 1.0, 0.1) << strategy;
  }
}

TEST_F(Sharding, CpuOffloadHoldsTheOptimizerSideInHostMemory) {
  // After a step, with CPU offload: the optimizer's side (the fp32 shards, their gradients and
  // Adam's two moments: 16 bytes per parameter, over N) is host memory; the model's side keeps
  // what the strategy keeps on the device: the whole weights under ZeRO-1 and -2 (4 bytes per
  // parameter), nothing under FULL_SHARD between uses.
  for (const auto& strategy : sharded_strategies()) {
    SteppedDeepNet run(
        accel::AcceleratorOptions().cpu(true).sharding_strategy(strategy).fsdp_offload_params(
            true));
    std::map<const void*, int64_t> model_side, optimizer_side;
    auto count = [](std::map<const void*, int64_t>& side, const torch::Tensor& t) {
      if (t.defined() && !accel::sharding::is_sharded(t)) {
        side[t.storage().data()] = static_cast<int64_t>(t.storage().nbytes());
      }
    };
    for (const auto& p : run.net->parameters()) {
      count(model_side, p);
      count(model_side, p.grad());
    }
    bool all_on_host = true;
    auto count_host = [&](const torch::Tensor& t) {
      count(optimizer_side, t);
      if (t.defined()) all_on_host = all_on_host && t.device().is_cpu();
    };
    accel_test::for_each_optimizer_tensor(run.optimizer, count_host);
    auto total = [](const std::map<const void*, int64_t>& side) {
      int64_t bytes = 0;
      for (const auto& entry : side) bytes += entry.second;
      return static_cast<double>(bytes);
    };
    // No storage is on both sides.
    for (const auto& entry : optimizer_side) EXPECT_EQ(model_side.count(entry.first), 0u);
    EXPECT_TRUE(all_on_host) << strategy;
    const double n = static_cast<double>(shard_count(strategy));
    const double host_expected = 16.0 * static_cast<double>(run.parameters) / n;
    EXPECT_NEAR(total(optimizer_side) / host_expected, 1.0, 0.1) << strategy;
    if (shards_parameters(strategy)) {
      EXPECT_EQ(total(model_side), 0.0) << strategy;
    } else {
      EXPECT_NEAR(total(model_side) / (4.0 * static_cast<double>(run.parameters)), 1.0, 0.1)
          << strategy;
    }
    if (rank() == 0) {
      std::printf(
          "%s, CPU offload, %d processes: %.0f bytes on the optimizer's side (host), "
          "%.0f on the model's\n",
          strategy.c_str(), static_cast<int>(world_size()), total(optimizer_side),
          total(model_side));
    }
  }
}

TEST_F(Sharding, NativeCollectivesAndTheirAllReduceFormsGiveTheSameTraining) {
  // Over Gloo the Accelerator moves slices with all-reduces; NCCL uses c10d's reduce-scatter and
  // all-gather. Both, driven by hand over this job's Gloo group, train alike.
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  auto group = accel::distributed::DistributedState::existing()->device_group();
  using accel::sharding::ShardCollectives;
  std::vector<std::vector<torch::Tensor>> results;
  // Each form also with the shards in host memory (CPU offload), which adds the copies between
  // the two.
  for (const auto& [collectives, offload] :
       std::vector<std::pair<ShardCollectives, bool>>{{ShardCollectives::native, false},
                                                      {ShardCollectives::all_reduce, false},
                                                      {ShardCollectives::native, true},
                                                      {ShardCollectives::all_reduce, true}}) {
    torch::manual_seed(21);
    Net net;
    torch::optim::AdamW optimizer(groups(net), {});
    accel::sharding::OptimizerShards shards(optimizer, accel::sharding::ShardingPlan(group)
                                                           .unit_bytes(128)
                                                           .collectives(collectives)
                                                           .offload_to_host(offload));
    for (int64_t step = 0; step < 5; ++step) {
      auto [x, y] = batch(step);
      shards.arm();
      torch::mse_loss(net->forward(x), y).backward();
      shards.finish_backward(true);
      optimizer.step();
      shards.gather_parameters();
      optimizer.zero_grad();
    }
    results.push_back(weights(net));
  }
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_LE(worst_difference(results[0], results[i]), 1e-6) << "form " << i;
  }
}

/// Every strategy of sharded_strategies(), without CPU offload and with it.
std::vector<std::pair<std::string, bool>> strategies_with_and_without_offload() {
  std::vector<std::pair<std::string, bool>> out;
  for (const bool offload : {false, true}) {
    for (const auto& strategy : sharded_strategies()) out.emplace_back(strategy, offload);
  }
  return out;
}

std::string shared_folder(const std::string& name) {
  return ::testing::TempDir() + "/accel_sharding_" + name + "_" + std::getenv("MASTER_PORT");
}

TEST_F(Sharding, SaveAndLoadStateResumesBitForBit) {
  for (const auto& [strategy, offload] : strategies_with_and_without_offload()) {
    SCOPED_TRACE(strategy + (offload ? ", CPU offload" : ""));
    const auto folder = shared_folder("resume_" + strategy + (offload ? "_offload" : ""));
    auto options = accel::AcceleratorOptions()
                       .cpu(true)
                       .gradient_accumulation_steps(2)
                       .sharding_strategy(strategy)
                       .fsdp_offload_params(offload);
    std::vector<torch::Tensor> straight;
    {
      accel::Accelerator accelerator(options);
      torch::manual_seed(11);
      Net net;
      accelerator.prepare(net);
      auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
      train(accelerator, net, optimizer, 0, 6);
      accelerator.save_state(folder);
      train(accelerator, net, optimizer, 6, 6);
      straight = weights(net);
    }
    accel::Accelerator accelerator(options);
    torch::manual_seed(99);  // other initial weights: everything must come from the checkpoint
    Net net;
    accelerator.prepare(net);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
    accelerator.load_state(folder);
    EXPECT_TRUE(
        std::filesystem::exists(folder + "/optimizer_shard_" + std::to_string(rank()) + ".pt"));
    train(accelerator, net, optimizer, 6, 6);
    const auto resumed = weights(net);
    for (size_t i = 0; i < straight.size(); ++i) {
      EXPECT_TRUE(torch::equal(resumed[i], straight[i])) << strategy << " tensor " << i;
    }
    accelerator.wait_for_everyone();
    if (rank() == 0) std::filesystem::remove_all(folder);
  }
}

void save_model_writes_the_whole_weights(const std::string& strategy) {
  const auto folder = shared_folder("save_model_" + strategy);
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .sharding_strategy(strategy)
                                     .fsdp_transformer_layer_cls_to_wrap({"Linear"}));
  torch::manual_seed(13);
  Net net;
  accelerator.prepare(net);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
  train(accelerator, net, optimizer, 0, 4);
  // Every process takes part; the main one writes. Small shards: one file per tensor or two.
  accelerator.save_model(net, folder, accel::SaveModelOptions().max_shard_size("200B"));
  const auto expected = weights(net);  // gathered (collective)
  if (rank() == 0) {
    std::map<std::string, torch::Tensor> saved;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      if (entry.path().extension() != ".safetensors") continue;
      for (auto& [name, tensor] : accel::load_safetensors(entry.path().string()))
        saved[name] = tensor;
    }
    const auto named = net->named_parameters();
    ASSERT_EQ(saved.size(), named.size());
    for (size_t i = 0; i < named.size(); ++i) {
      ASSERT_EQ(saved.count(named[i].key()), 1u) << named[i].key();
      EXPECT_TRUE(torch::equal(saved[named[i].key()], expected[i])) << named[i].key();
    }
    EXPECT_TRUE(std::filesystem::exists(folder + "/model.safetensors.index.json"));
  }
  // Not in the pickled form, which would read the parameters' bytes directly.
  try {
    accelerator.save_model(net, folder, accel::SaveModelOptions().safe_serialization(false));
    ADD_FAILURE() << "a FULL_SHARD model was saved in LibTorch's archive format";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("writes safetensors only"), std::string::npos)
        << error.what();
  }
  accelerator.wait_for_everyone();
  if (rank() == 0) std::filesystem::remove_all(folder);
}

TEST_F(Sharding, FullShardSaveModelWritesTheWholeWeights) {
  for (const auto& strategy : parameter_sharding_strategies()) {
    SCOPED_TRACE(strategy);
    save_model_writes_the_whole_weights(strategy);
  }
}

void sharded_state_dict_resumes(const std::string& strategy) {
  const auto folder = shared_folder("sharded_state_dict_" + strategy);
  auto options = accel::AcceleratorOptions()
                     .cpu(true)
                     .gradient_accumulation_steps(2)
                     .sharding_strategy(strategy)
                     .fsdp_transformer_layer_cls_to_wrap({"Linear"})
                     .fsdp_state_dict_type("SHARDED_STATE_DICT");
  std::vector<torch::Tensor> straight;
  {
    accel::Accelerator accelerator(options);
    torch::manual_seed(17);
    Net net;
    accelerator.prepare(net);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
    train(accelerator, net, optimizer, 0, 6);
    accelerator.save_state(folder);
    train(accelerator, net, optimizer, 6, 6);
    straight = weights(net);
  }
  // Each process wrote its shards (under HYBRID_SHARD, those of the first machine: the others
  // hold the same), numbered among the processes that share them out; process 0 the index.
  const int64_t shards = shard_count(strategy);
  EXPECT_TRUE(std::filesystem::exists(folder + "/model_shard_" + std::to_string(rank() % shards) +
                                      ".safetensors"));
  for (int64_t r = shards; r < world_size(); ++r) {
    EXPECT_FALSE(
        std::filesystem::exists(folder + "/model_shard_" + std::to_string(r) + ".safetensors"));
  }
  EXPECT_TRUE(std::filesystem::exists(folder + "/model.shards.json"));
  EXPECT_FALSE(std::filesystem::exists(folder + "/model.safetensors"));
  {
    accel::Accelerator accelerator(options);
    torch::manual_seed(98);
    Net net;
    accelerator.prepare(net);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
    accelerator.load_state(folder);
    train(accelerator, net, optimizer, 6, 6);
    const auto resumed = weights(net);
    for (size_t i = 0; i < straight.size(); ++i) {
      EXPECT_TRUE(torch::equal(resumed[i], straight[i])) << "tensor " << i;
    }
  }
  {
    // A run that writes whole weights reads the sharded ones as well.
    accel::Accelerator accelerator(options.fsdp_state_dict_type("FULL_STATE_DICT"));
    torch::manual_seed(97);
    Net net;
    accelerator.prepare(net);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
    accelerator.load_state(folder);
    train(accelerator, net, optimizer, 6, 6);
    const auto resumed = weights(net);
    for (size_t i = 0; i < straight.size(); ++i) {
      EXPECT_TRUE(torch::equal(resumed[i], straight[i])) << "whole, tensor " << i;
    }
  }
  // The launcher's merge-weights of such a folder is tested with the launcher
  // (test/launcher/merge_weights_test.cpp).
  accel::Accelerator(accel::AcceleratorOptions().cpu(true)).wait_for_everyone();
  if (rank() == 0) {
    std::filesystem::remove_all(folder);
  }
}

TEST_F(Sharding, ShardedStateDictResumesUnderEitherStateDictType) {
  for (const auto& strategy : parameter_sharding_strategies()) {
    SCOPED_TRACE(strategy);
    sharded_state_dict_resumes(strategy);
  }
}

// A checkpoint moves between strategies on the same processes: each sharded strategy's state is
// re-split into NO_SHARD's and back, and training goes on as it would have. A checkpoint that does
// not record its optimizers' layouts (written before they were recorded) is still refused.
TEST_F(Sharding, CheckpointsMoveBetweenStrategies) {
  for (const auto& strategy : sharded_strategies()) {
    for (const bool into_no_shard : {true, false}) {
      const std::string from = into_no_shard ? strategy : "NO_SHARD";
      const std::string to = into_no_shard ? "NO_SHARD" : strategy;
      SCOPED_TRACE(from + " -> " + to);
      const auto folder = shared_folder("strategies_" + from + "_" + to);
      auto options = [](const std::string& s) {
        return accel::AcceleratorOptions()
            .cpu(true)
            .gradient_accumulation_steps(2)
            .sharding_strategy(s);
      };
      std::vector<torch::Tensor> straight;
      {
        accel::Accelerator accelerator(options(from));
        torch::manual_seed(19);
        Net net;
        accelerator.prepare(net);
        auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
        train(accelerator, net, optimizer, 0, 6);
        accelerator.save_state(folder);
        train(accelerator, net, optimizer, 6, 6);
        straight = weights(net);
      }
      {
        accel::Accelerator accelerator(options(to));
        torch::manual_seed(96);
        Net net;
        accelerator.prepare(net);
        auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
        accelerator.load_state(folder);
        train(accelerator, net, optimizer, 6, 6);
        EXPECT_LE(worst_difference(weights(net), straight), 1e-6);
      }
      {
        accel::Accelerator accelerator(options(to));
        if (rank() == 0) {
          // As an older checkpoint: no layouts recorded.
          const auto path = folder + "/accel_state.json";
          std::ifstream in(path);
          std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
          in.close();
          std::ofstream(path) << std::regex_replace(text, std::regex("\"layout\""), "\"old\"");
        }
        accelerator.wait_for_everyone();
        Net net;
        accelerator.prepare(net);
        auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
        try {
          accelerator.load_state(folder);
          ADD_FAILURE() << "a checkpoint without layouts loaded into another strategy";
        } catch (const c10::Error& error) {
          EXPECT_NE(
              std::string(error.what())
                  .find("was saved with sharding_strategy " + from + " and this run uses " + to),
              std::string::npos)
              << error.what();
        }
      }
      {
        // ... and still loads with the strategy it was saved with.
        accel::Accelerator same(options(from));
        torch::manual_seed(95);
        Net same_net;
        same.prepare(same_net);
        auto same_optimizer = same.prepare(torch::optim::AdamW(groups(same_net), {}));
        same.load_state(folder);
        train(same, same_net, same_optimizer, 6, 6);
        EXPECT_LE(worst_difference(weights(same_net), straight), 1e-6) << "as an older checkpoint";
        same.wait_for_everyone();
      }
      if (rank() == 0) std::filesystem::remove_all(folder);
    }
  }
}

TEST_F(Sharding, UnshardableOptimizersAndStrategiesAreRefused) {
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).sharding_strategy("SHARD_GRAD_OP"));
  Net net;
  accelerator.prepare(net);
  try {
    accelerator.prepare(torch::optim::LBFGS(net->parameters()));
    ADD_FAILURE() << "LBFGS was sharded";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("LBFGS cannot be sharded"), std::string::npos);
  }
  // HYBRID_SHARD on one machine would be FULL_SHARD with an extra collective: refused, saying so
  // (the two-machine runs of this suite train with it).
  if (machines() == 1) {
    try {
      accel::Accelerator refused(
          accel::AcceleratorOptions().cpu(true).sharding_strategy("HYBRID_SHARD"));
      ADD_FAILURE() << "HYBRID_SHARD was accepted on one machine";
    } catch (const c10::Error& error) {
      EXPECT_NE(std::string(error.what())
                    .find("HYBRID_SHARD shards within each machine and replicates across "
                          "machines, and this job's " +
                          std::to_string(world_size()) + " processes are all on one machine"),
                std::string::npos)
          << error.what();
    }
  }
}

TEST_F(Sharding, FullShardErrorsNameTheProblem) {
  {
    // A class to wrap that the model does not have: the error lists the ones it has.
    accel::Accelerator accelerator(accel::AcceleratorOptions()
                                       .cpu(true)
                                       .sharding_strategy("FULL_SHARD")
                                       .fsdp_transformer_layer_cls_to_wrap({"Linear", "Blok"}));
    Net net;
    accelerator.prepare(net);
    try {
      accelerator.prepare(torch::optim::SGD(net->parameters(), 0.1));
      ADD_FAILURE() << "a class to wrap that matches nothing was accepted";
    } catch (const c10::Error& error) {
      const std::string what = error.what();
      EXPECT_NE(what.find("names 'Blok', which is the class of no submodule"), std::string::npos)
          << what;
      EXPECT_NE(what.find("torch::nn::LinearImpl"), std::string::npos) << what;
    }
  }
  // The optimizer of a model not prepared yet.
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).sharding_strategy("FULL_SHARD"));
  Net net;
  try {
    accelerator.prepare(torch::optim::SGD(net->parameters(), 0.1));
    ADD_FAILURE() << "FULL_SHARD sharded an optimizer before its model was prepared";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("prepare the model before its optimizer"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
