// Models that do not use every parameter in every step, across processes: a shared body with two
// heads, the second used on some micro-steps, some windows or some processes only. With
// find_unused_parameters the weights equal one process's run of the same global batches (AdamW,
// weight decay on), the second head untouched in windows where no process used it; without it,
// the first such step raises on every process, naming the parameters; static_graph learns a
// fixed set and refuses a change. sync_each_batch, which synchronises every micro-step, trains
// the same. Run on 2 and 4 processes by `accel launch` (see test/CMakeLists.txt).

#include <accel/accel.h>

#include "support/sharded_training.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

int64_t rank() { return std::atoll(std::getenv("RANK")); }
int64_t world_size() { return std::atoll(std::getenv("WORLD_SIZE")); }

struct TwoHeadsImpl : torch::nn::Module {
  TwoHeadsImpl() {
    torch::manual_seed(5);
    body = register_module("body", torch::nn::Linear(8, 16));
    a = register_module("a", torch::nn::Linear(16, 1));
    b = register_module("b", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_b) {
    auto hidden = torch::tanh(body(x));
    return use_b ? a(hidden) + b(hidden) : a(hidden);
  }
  torch::nn::Linear body{nullptr}, a{nullptr}, b{nullptr};
};
TORCH_MODULE(TwoHeads);

/// Whether process `process` uses head b at micro-step `micro` (accumulation 2: windows of two).
using Schedule = std::function<bool(int64_t micro, int64_t process)>;

/// Window 0: b everywhere. Window 1: b nowhere (not stepped). Window 2: b on the first
/// micro-step only, so the synchronising one does not reach it. Window 3: on the second only.
/// Window 4: on process 0 only. Window 5: on the last process's synchronising micro-step only.
bool mixed_schedule(int64_t micro, int64_t process) {
  switch (micro / 2) {
    case 0:
      return true;
    case 1:
      return false;
    case 2:
      return micro % 2 == 0;
    case 3:
      return micro % 2 == 1;
    case 4:
      return process == 0;
    default:
      return process == world_size() - 1 && micro % 2 == 1;
  }
}

/// The same with every process making the same choice at each micro-step (windows 4 and 5: b
/// everywhere, then nowhere). FULL_SHARD gathers a unit when an operator uses it, so every
/// process must use the same units in a micro-step, as under FSDP.
bool uniform_schedule(int64_t micro, int64_t process) {
  if (micro / 2 == 4) return true;
  if (micro / 2 == 5) return false;
  return mixed_schedule(micro, process);
}

Schedule schedule_for(const std::string& strategy) {
  return strategy == "FULL_SHARD" ? Schedule(uniform_schedule) : Schedule(mixed_schedule);
}

constexpr int64_t kMicroSteps = 12, kAccumulation = 2, kBatch = 4;

std::pair<torch::Tensor, torch::Tensor> batch(int64_t micro, int64_t process) {
  torch::manual_seed(1000 * micro + process);
  auto x = torch::randn({kBatch, 8});
  return {x, torch::randn({kBatch, 1})};
}

/// Plain LibTorch on one process: every process's micro-batches of a window, each loss divided
/// by the batches the window averages over, then one step.
std::vector<torch::Tensor> one_process(const Schedule& uses_b) {
  TwoHeads model;
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2));
  const int64_t n = world_size();
  for (int64_t micro = 0; micro < kMicroSteps; ++micro) {
    for (int64_t process = 0; process < n; ++process) {
      auto [x, y] = batch(micro, process);
      auto loss = torch::mse_loss(model->forward(x, uses_b(micro, process)), y);
      (loss / static_cast<double>(kAccumulation * n)).backward();
    }
    if (micro % kAccumulation == kAccumulation - 1) {
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  return accel_test::weights(model);
}

/// The sharded strategies' units: accel's (a unit per module under find_unused_parameters), a
/// Linear each by FSDP's class policy, or one for the whole model (a size policy that wraps
/// nothing), where the body and heads share a unit.
enum class Units { by_default, by_layer, one };

accel::AcceleratorOptions options(const std::string& strategy, bool find_unused,
                                  bool static_graph = false, Units units = Units::by_default) {
  auto options = accel::AcceleratorOptions()
                     .cpu(true)
                     .gradient_accumulation_steps(kAccumulation)
                     .sharding_strategy(strategy)
                     .ddp(accel::DistributedDataParallelOptions()
                              .find_unused_parameters(find_unused)
                              .static_graph(static_graph));
  if (units == Units::by_layer) options.fsdp_transformer_layer_cls_to_wrap({"Linear"});
  if (units == Units::one) options.fsdp_min_num_params(int64_t{1} << 40);
  return options;
}

/// The accel run of `Model` (a body and heads a and b, forward(x, use_b)).
template <typename Model = TwoHeads>
std::vector<torch::Tensor> accelerated(const accel::AcceleratorOptions& options,
                                       const Schedule& uses_b) {
  accel::Accelerator accelerator(options);
  Model model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(
      torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-2)));
  for (int64_t micro = 0; micro < kMicroSteps; ++micro) {
    auto scope = accelerator.accumulate(model);
    auto [x, y] = batch(micro, rank());
    accelerator.backward(torch::mse_loss(model->forward(x, uses_b(micro, rank())), y));
    optimizer.step();
    optimizer.zero_grad();
  }
  return accel_test::weights(model);
}

const std::vector<std::string> kStrategies = {"NO_SHARD", "SHARD_OPTIMIZER_STATE", "SHARD_GRAD_OP",
                                              "FULL_SHARD"};

}  // namespace

TEST(UnusedParameters, FindUnusedParametersTrainsAsOneProcessUnderEveryStrategy) {
  // The schedule matters: b's weights differ from a run where b is always used.
  EXPECT_GT(accel_test::worst_difference(one_process(mixed_schedule),
                                         one_process([](int64_t, int64_t) { return true; })),
            1e-3);
  for (const auto& strategy : kStrategies) {
    const auto schedule = schedule_for(strategy);
    const auto reference = one_process(schedule);
    for (const auto units : {Units::by_default, Units::by_layer}) {
      const double difference = accel_test::worst_difference(
          accelerated(options(strategy, true, false, units), schedule), reference);
      EXPECT_LE(difference, 1e-6) << strategy;
      if (rank() == 0) {
        std::printf(
            "%s (%s), %lld processes, find_unused_parameters: weights within %.3g of "
            "one process's\n",
            strategy.c_str(), units == Units::by_layer ? "units by Linear" : "default units",
            static_cast<long long>(world_size()), difference);
      }
    }
  }
}

TEST(UnusedParameters, AnUnusedParameterInAUnitWithUsedOnesIsNotStepped) {
  // One unit holds the body and both heads; b is used in the first window only. On one process
  // b then keeps its value (no gradient, no step); sharded, the unit's shard is stepped for the
  // body and a, and b's elements (values and AdamW's moments) are put back.
  const Schedule first_window = [](int64_t micro, int64_t) { return micro < kAccumulation; };
  const auto reference = one_process(first_window);
  for (const auto& strategy : kStrategies) {
    const double difference = accel_test::worst_difference(
        accelerated(options(strategy, true, false, Units::one), first_window), reference);
    EXPECT_LE(difference, 1e-6) << strategy;
    if (rank() == 0) {
      std::printf(
          "%s, %lld processes, one unit, b used in the first window only: weights "
          "within %.3g of one process's\n",
          strategy.c_str(), static_cast<long long>(world_size()), difference);
    }
  }
}

TEST(UnusedParameters, SyncEachBatchTrainsTheSame) {
  // Every micro-step averages the gradients (twice the all-reduces), and what an earlier
  // micro-step used counts as used in the window though its gradients were sent already.
  for (const auto& strategy : kStrategies) {
    const auto schedule = schedule_for(strategy);
    const double difference = accel_test::worst_difference(
        accelerated(options(strategy, true).sync_each_batch(true), schedule),
        one_process(schedule));
    EXPECT_LE(difference, 1e-6) << strategy;
    if (rank() == 0) {
      std::printf("%s, %lld processes, sync_each_batch: weights within %.3g of one process's\n",
                  strategy.c_str(), static_cast<long long>(world_size()), difference);
    }
  }
  for (const bool each : {false, true}) {
    accel::Accelerator accelerator(options("NO_SHARD", false).sync_each_batch(each));
    TwoHeads model;
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters()));
    for (int64_t micro = 0; micro < kMicroSteps; ++micro) {
      auto scope = accelerator.accumulate(model);
      auto [x, y] = batch(micro, rank());
      accelerator.backward(torch::mse_loss(model->forward(x, true), y));
      optimizer.step();
      optimizer.zero_grad();
    }
    EXPECT_EQ(accelerator.gradient_all_reduces(), each ? kMicroSteps : kMicroSteps / kAccumulation);
  }
}

TEST(UnusedParameters, WithoutTheOptionAProcessWhoseLossMissesParametersRaisesNamingThem) {
  // Head b is used on process 0 only: the other processes' losses do not reach it. As DDP, no
  // collective per step finds out what the others used: each process whose backward did not
  // reach b (seen by a hook on each parameter, not a walk of the graph) sends zeros for it, so no
  // process waits in an all-reduce, and raises naming it; the job goes on afterwards. (Under
  // FULL_SHARD, where every process must use the same units, b is used by none: all raise.)
  for (const auto& strategy : kStrategies) {
    accel::Accelerator accelerator(options(strategy, false));
    TwoHeads model;
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters()));
    auto [x, y] = batch(0, rank());
    std::string message;
    const bool uses_b = strategy != "FULL_SHARD" && rank() == 0;
    try {
      accelerator.backward(torch::mse_loss(model->forward(x, uses_b), y));
    } catch (const c10::Error& e) {
      message = e.what_without_backtrace();
    }
    if (uses_b) {
      EXPECT_EQ(message, "") << strategy;
    } else {
      EXPECT_NE(message.find("b.weight, b.bias got no gradient in this step on process " +
                             std::to_string(rank())),
                std::string::npos)
          << strategy << ": " << message;
      EXPECT_NE(message.find("find_unused_parameters(true)"), std::string::npos) << message;
      EXPECT_EQ(message.find("Python"), std::string::npos) << message;
      EXPECT_EQ(message.find("body."), std::string::npos) << message;
    }
    optimizer.zero_grad();
    // A step that uses everything everywhere still works: nothing was left half-reduced.
    auto again = batch(1, rank());
    accelerator.backward(torch::mse_loss(model->forward(again.first, true), again.second));
    optimizer.step();
  }
}

TEST(UnusedParameters, FrozenParametersNeverNeedTheOption) {
  accel::Accelerator accelerator(options("NO_SHARD", false));
  TwoHeads model;
  model->b->weight.requires_grad_(false);
  model->b->bias.requires_grad_(false);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters()));
  for (int64_t micro = 0; micro < 4; ++micro) {
    auto scope = accelerator.accumulate(model);
    auto [x, y] = batch(micro, rank());
    EXPECT_NO_THROW(accelerator.backward(torch::mse_loss(model->forward(x, false), y)));
    optimizer.step();
    optimizer.zero_grad();
  }
}

TEST(UnusedParameters, StaticGraphLearnsAFixedSetAndRefusesAChange) {
  // b is never used: the set stays fixed, and the run equals one process's (b never stepped).
  const Schedule never = [](int64_t, int64_t) { return false; };
  const auto reference = one_process(never);
  const double difference = accel_test::worst_difference(
      accelerated(options("NO_SHARD", false, /*static_graph=*/true), never), reference);
  EXPECT_LE(difference, 1e-6);
  // Then b is used: the set changed, and every process says so.
  accel::Accelerator accelerator(options("NO_SHARD", false, true));
  TwoHeads model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters()));
  std::string message;
  for (int64_t micro = 0; micro < 4 && message.empty(); ++micro) {
    auto scope = accelerator.accumulate(model);
    auto [x, y] = batch(micro, rank());
    try {
      accelerator.backward(torch::mse_loss(model->forward(x, micro >= 2), y));
    } catch (const c10::Error& e) {
      message = e.what_without_backtrace();
      EXPECT_EQ(micro, 3);  // the second window's synchronising micro-step
    }
    optimizer.step();
    optimizer.zero_grad();
  }
  EXPECT_NE(message.find("static_graph"), std::string::npos) << message;
  EXPECT_NE(message.find("b.weight, b.bias"), std::string::npos) << message;
  if (rank() == 0) {
    std::printf(
        "static_graph, %lld processes: weights within %.3g of one process's; a changed "
        "set: %s\n",
        static_cast<long long>(world_size()), difference, message.c_str());
  }
}

/// A body of checkpointed blocks (fsdp_activation_checkpointing wraps each Block of the
/// Sequential), and the two heads.
struct BlockImpl : torch::nn::Module {
  BlockImpl() { linear = register_module("linear", torch::nn::Linear(8, 16)); }
  torch::Tensor forward(const torch::Tensor& x) { return torch::tanh(linear(x)); }
  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(Block);

struct CheckpointedHeadsImpl : torch::nn::Module {
  CheckpointedHeadsImpl() {
    torch::manual_seed(5);
    body = register_module("body", torch::nn::Sequential(Block()));
    a = register_module("a", torch::nn::Linear(16, 1));
    b = register_module("b", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_b) {
    auto hidden = body->forward(x);
    return use_b ? a(hidden) + b(hidden) : a(hidden);
  }
  torch::nn::Sequential body{nullptr};
  torch::nn::Linear a{nullptr}, b{nullptr};
};
TORCH_MODULE(CheckpointedHeads);

TEST(UnusedParameters, CheckpointedUnitsAreSeenUsed) {
  // Each checkpointed block's node keeps its module's parameters: find_unused_parameters sees
  // them used, and the run equals one process's without checkpointing (the same model).
  const auto checkpointed =
      accelerated<CheckpointedHeads>(options("NO_SHARD", true)
                                         .fsdp_transformer_layer_cls_to_wrap({"Block"})
                                         .fsdp_activation_checkpointing(true),
                                     mixed_schedule);
  EXPECT_LE(accel_test::worst_difference(checkpointed, one_process(mixed_schedule)), 1e-6);
}

TEST(UnusedParameters, ParametersHiddenInACheckpointClosureAreNamed) {
  // accel::checkpoint around a lambda that uses head a: the graph shows the block, not a's
  // parameters, until backward runs it again. find_unused_parameters cannot tell them from
  // unused ones, and says so before any collective.
  accel::Accelerator accelerator(options("NO_SHARD", true));
  TwoHeads model;
  accelerator.prepare(model);
  auto [x, y] = batch(0, rank());
  auto hidden = torch::tanh(model->body(x));
  auto out = accel::checkpoint([&](const torch::Tensor& h) { return model->a(h); }, hidden);
  std::string message;
  try {
    accelerator.backward(torch::mse_loss(out, y));
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  }
  EXPECT_NE(message.find("a.weight, a.bias, b.weight, b.bias"), std::string::npos) << message;
  EXPECT_NE(message.find("accel::checkpoint"), std::string::npos) << message;
}

TEST(UnusedParameters, BothOptionsAreRefused) {
  try {
    accel::Accelerator accelerator(options("NO_SHARD", true, true));
    ADD_FAILURE() << "find_unused_parameters with static_graph was accepted";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find("find_unused_parameters and static_graph"), std::string::npos)
        << message;
  }
}

namespace {

/// A Linear whose weight is registered a second time on the parent, under another name (as
/// austinvhuang/libtorch-experiments' neural cellular automaton does): parameters() lists the
/// tensor twice, and an optimizer built from it steps it twice.
struct AliasedImpl : torch::nn::Module {
  AliasedImpl() {
    torch::manual_seed(5);
    fc = register_module("fc", torch::nn::Linear(8, 1));
    register_parameter("fc_weight", fc->weight);
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Aliased);

}  // namespace

TEST(UnusedParameters, AParameterRegisteredTwiceIsSynchronisedOnce) {
  // One process: every process's batches, averaged, then one step of the optimizer that holds
  // the weight twice.
  Aliased reference;
  ASSERT_EQ(reference->parameters().size(), 3u);
  torch::optim::AdamW reference_optimizer(reference->parameters(),
                                          torch::optim::AdamWOptions(1e-2));
  for (int64_t micro = 0; micro < 4; ++micro) {
    for (int64_t process = 0; process < world_size(); ++process) {
      auto [x, y] = batch(micro, process);
      (torch::mse_loss(reference->forward(x), y) / static_cast<double>(world_size())).backward();
    }
    reference_optimizer.step();
    reference_optimizer.zero_grad();
  }
  // The loss as a sum over the batch's items, divided by the items of every process
  // (backward(loss_sum, num_items)). The synchroniser, as DDP, holds the tensor once.
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  Aliased model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(
      torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-2)));
  for (int64_t micro = 0; micro < 4; ++micro) {
    auto [x, y] = batch(micro, rank());
    accelerator.backward(torch::mse_loss(model->forward(x), y, torch::Reduction::Sum), kBatch);
    optimizer.step();
    optimizer.zero_grad();
  }
  const double difference =
      accel_test::worst_difference(accel_test::weights(model), accel_test::weights(reference));
  EXPECT_LE(difference, 1e-6);
  if (rank() == 0) {
    std::printf("a weight registered twice, %lld processes: weights within %.3g of one process's\n",
                static_cast<long long>(world_size()), difference);
  }
}
