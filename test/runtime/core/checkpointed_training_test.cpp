// Activation checkpointing across processes: fsdp_activation_checkpointing trains to the same
// weights, bit for bit, as the same program without it, under NO_SHARD and FULL_SHARD, with
// dropout, accumulation and clipping on every micro-step; under FULL_SHARD the recomputation
// gathers each unit once more in backward, in place of backward's own gather, within the
// two-unit bound. Run on 2 processes by
// `accel launch` (see test/CMakeLists.txt).

#include <accel/accel.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "sharding/optimizer_shards.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int64_t rank() { return std::atoll(std::getenv("RANK")); }

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width) {
    up = register_module("up", torch::nn::Linear(width, 2 * width));
    down = register_module("down", torch::nn::Linear(2 * width, width));
    dropout = register_module("dropout", torch::nn::Dropout(0.2));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + down(dropout(torch::gelu(up(x)))); }
  torch::nn::Linear up{nullptr}, down{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Block);

struct Trained {
  std::vector<torch::Tensor> weights;
  int64_t gathers = 0, peak_gathered = 0, gathered_bound = 0;
};

/// Eight micro-steps, accumulation 2, clipping every micro-step, AdamW; each process its own
/// batches and dropout (seeded per process), the same in every run.
Trained train(const std::string& strategy, bool checkpointing) {
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .gradient_accumulation_steps(2)
                                     .sharding_strategy(strategy)
                                     .fsdp_transformer_layer_cls_to_wrap({"Block"})
                                     .fsdp_activation_checkpointing(checkpointing));
  torch::manual_seed(7);
  torch::nn::Sequential model;
  for (int i = 0; i < 4; ++i) model->push_back(Block(12));
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2));
  torch::manual_seed(100 + rank());
  for (int step = 0; step < 8; ++step) {
    auto scope = accelerator.accumulate(model);
    auto x = torch::randn({6, 12});
    accelerator.backward(model->forward(x).pow(2).mean());
    accelerator.clip_grad_norm_(model->parameters(), 0.5);
    optimizer.step();
    optimizer.zero_grad();
  }
  Trained out;
  for (const auto& p : model->parameters()) out.weights.push_back(p.detach().clone());
  if (const auto& shards = accel::sharding::shards_of(optimizer);
      shards && shards->shards_parameters()) {
    const auto statistics = shards->gather_statistics();
    out.gathers = statistics.gathers;
    out.peak_gathered = statistics.peak_bytes;
    out.gathered_bound = 2 * statistics.largest_unit_bytes + statistics.largest_shard_bytes;
  }
  return out;
}

TEST(CheckpointedTraining, SameWeightsBitForBitUnderNoShardAndFullShard) {
  for (const std::string strategy : {"NO_SHARD", "FULL_SHARD"}) {
    const auto plain = train(strategy, false);
    const auto checkpointed = train(strategy, true);
    ASSERT_EQ(plain.weights.size(), checkpointed.weights.size());
    for (size_t i = 0; i < plain.weights.size(); ++i) {
      EXPECT_TRUE(torch::equal(plain.weights[i], checkpointed.weights[i]))
          << strategy << ": parameter " << i << " differs by "
          << (plain.weights[i] - checkpointed.weights[i]).abs().max().item<double>();
    }
    if (strategy == "FULL_SHARD") {
      // Backward gathers each unit to recompute it, and the unit's own backward finds it still
      // whole: as many gathers as without checkpointing (where backward's formulas gather it),
      // within the same two-unit bound.
      EXPECT_EQ(checkpointed.gathers, plain.gathers);
      EXPECT_LE(checkpointed.peak_gathered, checkpointed.gathered_bound);
      if (rank() == 0) {
        std::printf(
            "FULL_SHARD with activation checkpointing: %lld gathers (%lld without), "
            "peak gathered %lld bytes, bound %lld\n",
            static_cast<long long>(checkpointed.gathers), static_cast<long long>(plain.gathers),
            static_cast<long long>(checkpointed.peak_gathered),
            static_cast<long long>(checkpointed.gathered_bound));
      }
    }
  }
}

}  // namespace
