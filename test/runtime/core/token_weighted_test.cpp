// Losses summed over tokens of variable-length sequences: backward(loss_sum, num_items) divides
// each window's gradients by the items counted over its micro-steps and every process, so that
// accumulation 4 on N processes trains as one process on the 4N micro-batches taken as one batch,
// under every strategy; averaging each micro-batch's mean loss does not. Run on 2 and 4 processes
// by `accel launch` (see test/CMakeLists.txt).

#include <accel/accel.h>

#include "support/sharded_training.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

int64_t rank() { return std::atoll(std::getenv("RANK")); }
int64_t world_size() { return std::atoll(std::getenv("WORLD_SIZE")); }

constexpr int64_t kFeatures = 6, kMaxLength = 9, kSequences = 3, kAccumulation = 4, kWindows = 3;

/// A micro-batch of sequences of 1 to kMaxLength tokens, padded; `mask` marks the real tokens.
struct Batch {
  torch::Tensor x, y, mask;
  int64_t tokens = 0;
};

Batch batch(int64_t micro, int64_t process) {
  torch::manual_seed(500 * micro + process);
  Batch b;
  auto lengths = torch::randint(1, kMaxLength + 1, {kSequences});
  b.mask = (torch::arange(kMaxLength).unsqueeze(0) < lengths.unsqueeze(1))
               .to(torch::kFloat)
               .unsqueeze(-1);
  b.x = torch::randn({kSequences, kMaxLength, kFeatures});
  b.y = torch::randn({kSequences, kMaxLength, kFeatures});
  b.tokens = lengths.sum().item<int64_t>();
  return b;
}

torch::nn::Sequential model() {
  torch::manual_seed(9);
  return torch::nn::Sequential(torch::nn::Linear(kFeatures, 16), torch::nn::Tanh(),
                               torch::nn::Linear(16, kFeatures));
}

/// The squared error summed over the real tokens' features.
torch::Tensor loss_sum(torch::nn::Sequential& net, const Batch& b) {
  return ((net->forward(b.x) - b.y).pow(2) * b.mask).sum();
}

torch::optim::SGDOptions sgd() { return torch::optim::SGDOptions(0.05).momentum(0.9); }

/// One process, each window's micro-batches of every process as one batch: the sum over all its
/// tokens divided by their count.
std::vector<torch::Tensor> one_process() {
  auto net = model();
  torch::optim::SGD optimizer(net->parameters(), sgd());
  const int64_t n = world_size();
  for (int64_t window = 0; window < kWindows; ++window) {
    int64_t tokens = 0;
    for (int64_t a = 0; a < kAccumulation; ++a) {
      for (int64_t process = 0; process < n; ++process) {
        tokens += batch(window * kAccumulation + a, process).tokens;
      }
    }
    for (int64_t a = 0; a < kAccumulation; ++a) {
      for (int64_t process = 0; process < n; ++process) {
        const auto b = batch(window * kAccumulation + a, process);
        (loss_sum(net, b) / static_cast<double>(tokens)).backward();
      }
    }
    optimizer.step();
    optimizer.zero_grad();
  }
  return accel_test::weights(net);
}

/// accel with accumulation kAccumulation: token-weighted, or each micro-batch's mean.
std::vector<torch::Tensor> accelerated(const std::string& strategy, bool token_weighted) {
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .gradient_accumulation_steps(kAccumulation)
                                     .sharding_strategy(strategy));
  auto net = model();
  accelerator.prepare(net);
  auto optimizer = accelerator.prepare(torch::optim::SGD(net->parameters(), sgd()));
  for (int64_t micro = 0; micro < kWindows * kAccumulation; ++micro) {
    auto scope = accelerator.accumulate(net);
    const auto b = batch(micro, rank());
    if (token_weighted) {
      accelerator.backward(loss_sum(net, b), b.tokens);
    } else {
      accelerator.backward(loss_sum(net, b) / static_cast<double>(b.tokens));
    }
    optimizer.step();
    optimizer.zero_grad();
  }
  return accel_test::weights(net);
}

}  // namespace

TEST(TokenWeighted, AWindowTrainsAsOneBatchOfAllItsTokens) {
  const auto reference = one_process();
  for (const std::string strategy :
       {"NO_SHARD", "SHARD_OPTIMIZER_STATE", "SHARD_GRAD_OP", "FULL_SHARD"}) {
    const double weighted = accel_test::worst_difference(accelerated(strategy, true), reference);
    const double mean_of_means =
        accel_test::worst_difference(accelerated(strategy, false), reference);
    EXPECT_LE(weighted, 1e-6) << strategy;
    // The ordinary loop is off by far more: the test's sequences do vary in length.
    EXPECT_GT(mean_of_means, 1e-3) << strategy;
    if (rank() == 0) {
      std::printf(
          "%s, %lld processes x accumulation %lld against one process's batch of %lld "
          "micro-batches: backward(loss_sum, tokens) within %.3g, mean of means %.3g\n",
          strategy.c_str(), static_cast<long long>(world_size()),
          static_cast<long long>(kAccumulation),
          static_cast<long long>(world_size() * kAccumulation), weighted, mean_of_means);
    }
  }
}

TEST(TokenWeighted, AStateSavedInsideAWindowResumesItsCount) {
  // save_state after the second of four micro-steps of a window; a new Accelerator loads it and
  // finishes the run: the window still divides by all its items, and the weights are one
  // process's.
  const std::string dir = "/tmp/accel-token-window-" + std::string(std::getenv("MASTER_PORT"));
  constexpr int64_t kSaveAfter = kAccumulation + 2;
  const auto options = accel::AcceleratorOptions()
                           .cpu(true)
                           .gradient_accumulation_steps(kAccumulation)
                           .sharding_strategy("FULL_SHARD");
  {
    accel::Accelerator accelerator(options);
    auto net = model();
    accelerator.prepare(net);
    auto optimizer = accelerator.prepare(torch::optim::SGD(net->parameters(), sgd()));
    for (int64_t micro = 0; micro < kSaveAfter; ++micro) {
      auto scope = accelerator.accumulate(net);
      const auto b = batch(micro, rank());
      accelerator.backward(loss_sum(net, b), b.tokens);
      optimizer.step();
      optimizer.zero_grad();
      if (micro == kSaveAfter - 1) accelerator.save_state(dir);
    }
  }
  accel::Accelerator accelerator(options);
  auto net = model();
  accelerator.prepare(net);
  auto optimizer = accelerator.prepare(torch::optim::SGD(net->parameters(), sgd()));
  accelerator.load_state(dir);
  for (int64_t micro = kSaveAfter; micro < kWindows * kAccumulation; ++micro) {
    auto scope = accelerator.accumulate(net);
    const auto b = batch(micro, rank());
    accelerator.backward(loss_sum(net, b), b.tokens);
    optimizer.step();
    optimizer.zero_grad();
  }
  const double difference = accel_test::worst_difference(accel_test::weights(net), one_process());
  EXPECT_LE(difference, 1e-6);
  if (rank() == 0) {
    std::printf(
        "FULL_SHARD, %lld processes, saved after micro-step %lld of a window of %lld and "
        "resumed: within %.3g of one process's\n",
        static_cast<long long>(world_size()), static_cast<long long>(kSaveAfter % kAccumulation),
        static_cast<long long>(kAccumulation), difference);
  }
  accelerator.wait_for_everyone();
  if (rank() == 0) std::filesystem::remove_all(dir);
}

TEST(TokenWeighted, BadCountsAndMixedWindowsAreRefused) {
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).gradient_accumulation_steps(2));
  auto net = model();
  accelerator.prepare(net);
  const auto b = batch(0, rank());
  for (const int64_t bad : {int64_t{0}, int64_t{-3}}) {
    try {
      accelerator.backward(loss_sum(net, b), bad);
      ADD_FAILURE() << "num_items " << bad << " was taken";
    } catch (const c10::Error& e) {
      const std::string message = e.what_without_backtrace();
      EXPECT_NE(message.find("num_items is " + std::to_string(bad)), std::string::npos) << message;
    }
  }
  // A window whose first micro-step averages and second counts items.
  std::string message;
  {
    auto first = accelerator.accumulate(net);
    accelerator.backward(loss_sum(net, b) / static_cast<double>(b.tokens));
  }
  try {
    auto second = accelerator.accumulate(net);
    accelerator.backward(loss_sum(net, b), b.tokens);
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  }
  EXPECT_NE(message.find("mixes backward(loss) and backward(loss_sum, num_items)"),
            std::string::npos)
      << message;
}
