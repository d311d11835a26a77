// A one-process job with a sharding strategy and CPU offload: the optimizer's side (the fp32
// shards, their gradients and the optimizer state) moves to host memory, as FSDP with one GPU and
// CPUOffload does. Without offload one process does not shard. Everything is checked against a
// plain LibTorch loop.

#include <accel/accel.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "sharding/optimizer_shards.h"
#include "sharding/sharded_parameter.h"
#include "support/sharded_training.h"
#include "support/temp_dir.h"

#include <string>
#include <utility>
#include <vector>

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl() {
    hidden = register_module("hidden", torch::nn::Linear(6, 9));
    head = register_module("head", torch::nn::Linear(9, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head(torch::tanh(hidden(x))); }
  torch::nn::Linear hidden{nullptr}, head{nullptr};
};
TORCH_MODULE(Net);

std::pair<torch::Tensor, torch::Tensor> batch(int64_t step) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(500 + step);
  auto x = torch::randn({8, 6}, generator);
  return {x, torch::cos(x.sum(1, true))};
}

using accel_test::weights;
using accel_test::worst_difference;

/// `micro_steps` micro-steps from `first`: accumulation 2, clipping at 0.5.
template <typename Optimizer>
void train(accel::Accelerator& accelerator, Net& net, Optimizer& optimizer, int64_t first,
           int64_t micro_steps) {
  accel_test::train_clipped(accelerator, net, optimizer, first, micro_steps, batch);
}

/// The same 10 optimizer steps in plain LibTorch.
std::vector<torch::Tensor> plain_weights() {
  torch::manual_seed(4);
  Net net;
  torch::optim::AdamW optimizer(net->parameters(), torch::optim::AdamWOptions(2e-2));
  for (int64_t step = 0; step < 20; ++step) {
    auto [x, y] = batch(step);
    (torch::mse_loss(net->forward(x), y) / 2).backward();
    if (step % 2 == 1) {
      torch::nn::utils::clip_grad_norm_(net->parameters(), 0.5);
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  return weights(net);
}

accel::AcceleratorOptions options(const std::string& strategy, bool offload) {
  return accel::AcceleratorOptions()
      .cpu(true)
      .gradient_accumulation_steps(2)
      .sharding_strategy(strategy)
      .fsdp_offload_params(offload);
}

class OneProcessOffload : public ::testing::TestWithParam<std::string> {};

TEST_P(OneProcessOffload, ShardsOnTheHostAndTrainsAsPlainLibTorch) {
  const auto& strategy = GetParam();
  accel::Accelerator accelerator(options(strategy, true));
  ASSERT_EQ(accelerator.num_processes(), 1);
  torch::manual_seed(4);
  Net net;
  accelerator.prepare(net);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(net->parameters(), {2e-2}));
  ASSERT_NE(accel::sharding::shards_of(optimizer), nullptr);
  EXPECT_TRUE(accel::sharding::shards_of(optimizer)->offloads_to_host());
  // The optimizer steps host tensors of their own, not the model's parameters.
  const auto& shard = optimizer.param_groups()[0].params()[0];
  for (const auto& p : net->parameters()) {
    EXPECT_EQ(accel::sharding::is_sharded(p), strategy == "FULL_SHARD");
    if (!accel::sharding::is_sharded(p)) {
      EXPECT_FALSE(shard.storage().is_alias_of(p.storage()));
    }
  }
  train(accelerator, net, optimizer, 0, 20);
  EXPECT_LE(worst_difference(weights(net), plain_weights()), 1e-6);
}

TEST_P(OneProcessOffload, SaveAndLoadStateResumeBitForBit) {
  const auto& strategy = GetParam();
  accel_test::TempDir folder("accel_one_process_offload");
  std::vector<torch::Tensor> straight;
  {
    accel::Accelerator accelerator(options(strategy, true));
    torch::manual_seed(4);
    Net net;
    accelerator.prepare(net);
    auto optimizer = accelerator.prepare(torch::optim::AdamW(net->parameters(), {2e-2}));
    train(accelerator, net, optimizer, 0, 6);
    accelerator.save_state(folder.path().string());
    train(accelerator, net, optimizer, 6, 6);
    straight = weights(net);
  }
  accel::Accelerator accelerator(options(strategy, true));
  torch::manual_seed(77);  // other weights: all of them must come from the checkpoint
  Net net;
  accelerator.prepare(net);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(net->parameters(), {2e-2}));
  accelerator.load_state(folder.path().string());
  train(accelerator, net, optimizer, 6, 6);
  const auto resumed = weights(net);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_TRUE(torch::equal(resumed[i], straight[i])) << "tensor " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, OneProcessOffload,
                         ::testing::Values("SHARD_OPTIMIZER_STATE", "SHARD_GRAD_OP", "FULL_SHARD"));

TEST(OneProcessSharding, WithoutOffloadOneProcessDoesNotShard) {
  accel::Accelerator accelerator(options("FULL_SHARD", false));
  Net net;
  accelerator.prepare(net);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(net->parameters(), {}));
  EXPECT_EQ(accel::sharding::shards_of(optimizer), nullptr);
}

TEST(OneProcessSharding, HybridShardWithOffloadOnOneProcessIsRefused) {
  try {
    accel::Accelerator accelerator(options("HYBRID_SHARD", true));
    ADD_FAILURE() << "HYBRID_SHARD on one process was accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("all on one machine"), std::string::npos)
        << error.what();
  }
}

}  // namespace
