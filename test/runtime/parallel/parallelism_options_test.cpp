// The device mesh's options and arithmetic, and the tensor-parallel plan's checks, in one
// process (the multi-process behaviour is in parallelism_test.cpp).

#include <accel/accel.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "distributed/device_mesh.h"
#include "support/env_guard.h"

#include <string>
#include <vector>

namespace {

using accel::distributed::MeshDim;
using accel::distributed::MeshLayout;
using accel_test::EnvGuard;

/// The message of what `run` throws; empty when it throws nothing.
template <typename Run>
std::string message_of(Run run) {
  try {
    run();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(ParallelismConfig, LaunchersVariablesAreReadOnlyWhenTheyAskForAMesh) {
  EnvGuard tp("PARALLELISM_CONFIG_TP_SIZE", "2");
  EnvGuard shard("PARALLELISM_CONFIG_DP_SHARD_SIZE", "2");
  EXPECT_FALSE(accel::resolve_options(accel::AcceleratorOptions()).parallelism_config);
  EnvGuard use("ACCELERATE_USE_PARALLELISM_CONFIG", "true");
  const auto resolved = accel::resolve_options(accel::AcceleratorOptions());
  ASSERT_TRUE(resolved.parallelism_config);
  EXPECT_EQ(resolved.parallelism_config->tp_size(), 2);
  EXPECT_EQ(resolved.parallelism_config->dp_shard_size(), 2);
  EXPECT_EQ(resolved.parallelism_config->dp_replicate_size(), 1);
  EXPECT_EQ(resolved.parallelism_config->cp_size(), 1);
  // dp_shard shards with FULL_SHARD unless a strategy was chosen.
  EXPECT_EQ(resolved.sharding_strategy, accel::ShardingStrategy::FullShard);
  EnvGuard chosen("ACCEL_SHARDING_STRATEGY", "SHARD_GRAD_OP");
  EXPECT_EQ(accel::resolve_options(accel::AcceleratorOptions()).sharding_strategy,
            accel::ShardingStrategy::ShardGradOp);
  // A config in code wins whole.
  const auto in_code = accel::resolve_options(
      accel::AcceleratorOptions().parallelism_config(accel::ParallelismConfig().cp_size(4)));
  EXPECT_EQ(in_code.parallelism_config->tp_size(), 1);
  EXPECT_EQ(in_code.parallelism_config->cp_size(), 4);
}

TEST(ParallelismConfig, ReplicateAndShardTogetherAreHybridShard) {
  const auto resolved = accel::resolve_options(accel::AcceleratorOptions().parallelism_config(
      accel::ParallelismConfig().dp_replicate_size(2).dp_shard_size(2)));
  EXPECT_EQ(resolved.sharding_strategy, accel::ShardingStrategy::HybridShard);
  // Replication alone is plain data parallelism.
  EXPECT_EQ(accel::resolve_options(accel::AcceleratorOptions().parallelism_config(
                                       accel::ParallelismConfig().dp_replicate_size(4)))
                .sharding_strategy,
            accel::ShardingStrategy::NoShard);
}

TEST(ParallelismConfig, BadSizesAreRefusedNamingThem) {
  const auto resolve = [](const accel::ParallelismConfig& config) {
    return message_of(
        [&] { accel::resolve_options(accel::AcceleratorOptions().parallelism_config(config)); });
  };
  EXPECT_NE(resolve(accel::ParallelismConfig().tp_size(0))
                .find("accel: invalid parallelism_config.tp_size: 0 (expected an integer >= 1)"),
            std::string::npos);
  const auto replicated = resolve(accel::ParallelismConfig().dp_replicate_size(2).tp_size(2));
  EXPECT_NE(replicated.find("dp_replicate_size 2 with dp_shard_size 1 beside tp_size 2"),
            std::string::npos)
      << replicated;
  EnvGuard use("ACCELERATE_USE_PARALLELISM_CONFIG", "true");
  EnvGuard cp("PARALLELISM_CONFIG_CP_SIZE", "-1");
  const auto from_env = message_of([] { accel::resolve_options(accel::AcceleratorOptions()); });
  EXPECT_NE(from_env.find("accel: invalid PARALLELISM_CONFIG_CP_SIZE: -1"), std::string::npos)
      << from_env;
}

TEST(ParallelismConfig, SizesMustMultiplyToTheProcesses) {
  const auto message = message_of([] {
    accel::Accelerator accelerator(accel::AcceleratorOptions().parallelism_config(
        accel::ParallelismConfig().dp_shard_size(2).tp_size(2)));
  });
  EXPECT_NE(message.find("(dp_replicate_size 1 x dp_shard_size 2 x tp_size 2 x cp_size 1 = 4) "
                         "do not multiply to the 1 processes of this job"),
            std::string::npos)
      << message;
}

TEST(ParallelismConfig, RanksNeedAMeshAndAreZeroOnOneProcess) {
  accel::Accelerator plain;
  EXPECT_NE(message_of([&] {
              plain.tensor_parallel_rank();
            }).find("tensor_parallel_rank() needs a device mesh"),
            std::string::npos);
  EXPECT_FALSE(plain.parallelism_config());
  accel::Accelerator meshed(
      accel::AcceleratorOptions().parallelism_config(accel::ParallelismConfig()));
  EXPECT_EQ(meshed.tensor_parallel_rank(), 0);
  EXPECT_EQ(meshed.data_parallel_rank(), 0);
  EXPECT_EQ(meshed.data_parallel_shard_rank(), 0);
  EXPECT_EQ(meshed.context_parallel_rank(), 0);
  EXPECT_EQ(meshed.pipeline_parallel_rank(), 0);
  EXPECT_EQ(meshed.parallelism_config()->dp_replicate_size(), 1);
}

TEST(MeshLayout, TensorParallelIsInnermostAsInAccelerate) {
  const MeshLayout layout(
      accel::ParallelismConfig().dp_replicate_size(2).dp_shard_size(2).cp_size(2).tp_size(2));
  EXPECT_EQ(layout.world_size(), 16);
  EXPECT_EQ(layout.coordinates(13), (accel::distributed::MeshCoordinates{0, 1, 1, 0, 1}));
  EXPECT_EQ(layout.rank_of({0, 1, 1, 0, 1}), 13);
  EXPECT_EQ(layout.group_ranks(5, {MeshDim::tp}), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(layout.group_ranks(5, {MeshDim::cp}), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(layout.group_ranks(5, {MeshDim::dp_shard}), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(layout.group_ranks(5, {MeshDim::dp_replicate}), (std::vector<int64_t>{5, 13}));
  // Gradients average over every dimension but tp.
  EXPECT_EQ(layout.group_ranks(5, {MeshDim::dp_replicate, MeshDim::dp_shard, MeshDim::cp}),
            (std::vector<int64_t>{1, 3, 5, 7, 9, 11, 13, 15}));
  EXPECT_EQ(layout.rank_in_group(5, {MeshDim::dp_shard, MeshDim::cp}), 2);
  EXPECT_EQ(layout.group_key(5, {MeshDim::tp}), "0.0.1.0.*");
}

// torchtitan's order: the pipeline outermost, so each stage's processes are consecutive ranks and
// a stage's data, sharding and tensor-parallel groups are those of a mesh without pp.
TEST(MeshLayout, PipelineIsOutermost) {
  const MeshLayout layout(accel::ParallelismConfig().pp_size(2).dp_shard_size(2).tp_size(2));
  EXPECT_EQ(layout.world_size(), 8);
  EXPECT_EQ(layout.coordinates(6), (accel::distributed::MeshCoordinates{1, 0, 1, 0, 0}));
  EXPECT_EQ(layout.group_ranks(1, {MeshDim::pp}), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(layout.group_ranks(5, {MeshDim::dp_shard}), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(layout.group_ranks(6, {MeshDim::tp}), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(layout.group_ranks(4, {MeshDim::dp_replicate, MeshDim::dp_shard, MeshDim::cp}),
            (std::vector<int64_t>{4, 6}));
}

struct TwoLayersImpl : torch::nn::Module {
  TwoLayersImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    act = register_module("act", torch::nn::ReLU());
    fc2 = register_module("fc2", torch::nn::Linear(8, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(act(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::ReLU act{nullptr};
};
TORCH_MODULE(TwoLayers);

TEST(TensorParallelPlan, IsCheckedAndIgnoredWithoutTensorParallelism) {
  accel::Accelerator accelerator;
  TwoLayers model;
  accelerator.prepare(model, accel::TensorParallelPlan{{"fc1", "colwise"}, {"fc2", "rowwise"}});
  EXPECT_EQ(model->fc1->weight.size(0), 8);
  const auto out = model(torch::ones({3, 4}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{3, 2}));
}

TEST(TensorParallelPlan, BadPlansNameThePatternTheModuleAndTheStyle) {
  auto refused = [](const accel::TensorParallelPlan& plan) {
    accel::Accelerator accelerator;
    TwoLayers model;
    return message_of([&] { accelerator.prepare(model, plan); });
  };
  EXPECT_NE(refused({{"fc1", "column"}})
                .find("gives 'fc1' the style 'column', which does not exist (styles: colwise, "
                      "rowwise"),
            std::string::npos);
  EXPECT_NE(refused({{"layers.*.fc1", "colwise"}})
                .find("pattern 'layers.*.fc1' matches no module of the model"),
            std::string::npos);
  EXPECT_NE(refused({{"act", "colwise"}})
                .find("splits 'act' colwise, which needs a torch::nn::Linear; it is a "
                      "torch::nn::ReLU"),
            std::string::npos);
  EXPECT_NE(refused({{"fc1", "embedding_rowwise"}})
                .find("splits 'fc1' embedding_rowwise, which needs a torch::nn::Embedding"),
            std::string::npos);
  EXPECT_NE(refused({{"fc*", "colwise"}}).find("pattern 'fc*' matches no module"),
            std::string::npos);
  EXPECT_NE(refused({{"fc1", "colwise"}, {"fc1", "rowwise"}})
                .find("names 'fc1' twice (colwise and rowwise)"),
            std::string::npos);
}

}  // namespace
