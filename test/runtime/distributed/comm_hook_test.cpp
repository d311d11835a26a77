// Gradient compression hooks (DistributedDataParallelOptions::comm_hook fp16 and bf16): the
// all-reduces send half the bytes of the buckets, counted in the hook, and the averaged gradients
// stay within the dtype's rounding of the uncompressed ones, under NO_SHARD and ZeRO-1. Run on 2
// and 4 processes by `accel launch` (see test/CMakeLists.txt).

#include <accel/accel.h>

#include "core/accelerator_access.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int64_t rank() { return std::atoll(std::getenv("RANK")); }
int64_t world_size() { return std::atoll(std::getenv("WORLD_SIZE")); }

struct Run {
  std::vector<torch::Tensor> gradients;  // the first step's, averaged
  accel::detail::CompressedGradientBytes bytes;
  std::vector<double> losses;
};

/// Five steps of an MLP, each process its own batches; the first step's averaged gradients.
Run train(const std::string& strategy, const std::string& hook) {
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).sharding_strategy(strategy).ddp(
          accel::DistributedDataParallelOptions().comm_hook(hook)));
  torch::manual_seed(4);
  torch::nn::Sequential model(torch::nn::Linear(16, 64), torch::nn::Tanh(),
                              torch::nn::Linear(64, 64), torch::nn::Tanh(),
                              torch::nn::Linear(64, 1));
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.05));
  Run run;
  for (int64_t step = 0; step < 5; ++step) {
    torch::manual_seed(100 * step + rank());
    auto x = torch::randn({32, 16});
    auto loss = torch::mse_loss(model->forward(x), x.sum(1, true).sin());
    accelerator.backward(loss);
    if (step == 0 && strategy == "NO_SHARD") {
      for (const auto& p : model->parameters()) run.gradients.push_back(p.grad().clone());
    }
    optimizer.step();
    optimizer.zero_grad();
    run.losses.push_back(loss.item<double>());
  }
  run.bytes = accel::detail::compressed_gradient_bytes(accelerator);
  return run;
}

double relative_difference(const std::vector<torch::Tensor>& a,
                           const std::vector<torch::Tensor>& b) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    difference += (a[i] - b[i]).pow(2).sum().item<double>();
    norm += b[i].pow(2).sum().item<double>();
  }
  return std::sqrt(difference / norm);
}

}  // namespace

TEST(CommHook, CompressionHalvesTheBytesWithinTheDtypesRounding) {
  const auto plain = train("NO_SHARD", "no");
  EXPECT_EQ(plain.bytes.buckets, 0);  // no hook, nothing counted
  const double n = static_cast<double>(world_size());
  for (const auto& [hook, unit_roundoff] : {std::pair<std::string, double>{"fp16", 0x1p-11},
                                            std::pair<std::string, double>{"bf16", 0x1p-8}}) {
    for (const std::string strategy : {"NO_SHARD", "SHARD_OPTIMIZER_STATE"}) {
      const auto compressed = train(strategy, hook);
      EXPECT_GT(compressed.bytes.buckets, 0) << hook << " " << strategy;
      EXPECT_EQ(compressed.bytes.sent * 2, compressed.bytes.buckets) << hook << " " << strategy;
      // The losses go the same way: the first is the same model's, later ones within rounding.
      EXPECT_EQ(compressed.losses.front(), plain.losses.front());
      EXPECT_NEAR(compressed.losses.back(), plain.losses.back(),
                  1e-2 * std::abs(plain.losses.back()));
      if (strategy != "NO_SHARD") continue;
      const double relative = relative_difference(compressed.gradients, plain.gradients);
      EXPECT_GT(relative, 0.0) << hook << ": compression should round somewhere";
      EXPECT_LE(relative, n * unit_roundoff) << hook;
      if (rank() == 0) {
        std::printf(
            "%s on %lld processes: buckets of %lld bytes sent as %lld; first gradients "
            "within %.3g (relative) of uncompressed (bound N*u = %.3g); last loss %.6f "
            "vs %.6f\n",
            hook.c_str(), static_cast<long long>(world_size()),
            static_cast<long long>(compressed.bytes.buckets),
            static_cast<long long>(compressed.bytes.sent), relative, n * unit_roundoff,
            compressed.losses.back(), plain.losses.back());
      }
    }
  }
}
