// `accel merge-weights` on sharded checkpoints written by real sharded runs
// (sharded_checkpoint_writer under `accel launch`): the merged weights are save_model's, value for
// value and in the same order, and bad input is refused with the file named.

#include "support/subprocess.h"

#include <accel/safetensors.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace {

using accel_test::run;

class MergeWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/accel_merge_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Writes a sharded checkpoint into checkpoint() and the same weights whole into whole().
  void write_checkpoint(const std::string& strategy, int processes, bool two_machines = false) {
    std::vector<std::string> command;
    if (two_machines) {
      command = {LAUNCH_TWO_MACHINES_PATH, ACCEL_CLI_PATH, std::to_string(processes)};
    } else {
      command = {ACCEL_CLI_PATH, "launch", "--num_processes", std::to_string(processes)};
    }
    for (const std::string& arg : {std::string(WRITER_PATH), strategy, checkpoint(), whole()}) {
      command.push_back(arg);
    }
    const auto result = run(command, {{"ACCEL_TIMEOUT", "60"}}, 240);
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  accel_test::RunResult merge(const std::string& from) {
    return run({ACCEL_CLI_PATH, "merge-weights", from, merged()}, {}, 120);
  }
  void expect_merged_equals_whole() {
    const auto result = merge(checkpoint());
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const auto expected = accel::load_safetensors(whole() + "/model.safetensors");
    const auto got = accel::load_safetensors(merged() + "/model.safetensors");
    ASSERT_EQ(got.size(), expected.size());
    auto want = expected.begin();
    for (const auto& [name, tensor] : got) {
      EXPECT_EQ(name, want->first);
      EXPECT_TRUE(torch::equal(tensor, want->second)) << name;
      ++want;
    }
  }

  std::string checkpoint() const { return dir_ + "/checkpoint"; }
  std::string whole() const { return dir_ + "/whole"; }
  std::string merged() const { return dir_ + "/merged"; }
  std::string dir_;
};

TEST_F(MergeWeights, FullShardOnTwoProcessesMergesIntoSaveModelsWeights) {
  write_checkpoint("FULL_SHARD", 2);
  EXPECT_TRUE(std::filesystem::exists(checkpoint() + "/model_shard_1.safetensors"));
  expect_merged_equals_whole();
}

TEST_F(MergeWeights, FullShardOnThreeProcessesMergesIntoSaveModelsWeights) {
  write_checkpoint("FULL_SHARD", 3);
  EXPECT_TRUE(std::filesystem::exists(checkpoint() + "/model_shard_2.safetensors"));
  expect_merged_equals_whole();
}

// Two machines of two processes: the first machine's processes wrote the shards (the second's
// hold the same ones).
TEST_F(MergeWeights, HybridShardOnTwoMachinesMergesIntoSaveModelsWeights) {
  write_checkpoint("HYBRID_SHARD", 4, /*two_machines=*/true);
  EXPECT_TRUE(std::filesystem::exists(checkpoint() + "/model_shard_1.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(checkpoint() + "/model_shard_2.safetensors"));
  expect_merged_equals_whole();
}

// A tensor-parallel checkpoint holds its weights whole (gathered from the slices when saved):
// merging gives them as one file, which Python's safetensors reads.
TEST_F(MergeWeights, TensorParallelCheckpointGivesItsWholeWeights) {
  write_checkpoint("TENSOR_PARALLEL", 2);
  EXPECT_TRUE(std::filesystem::exists(checkpoint() + "/optimizer_shard_1.pt"));
  expect_merged_equals_whole();
  // The project's Python environment (scripts/python-env.sh) has safetensors (Accelerate needs it).
  const auto read =
      run({"bash", "-c", "\"$(\"$0\")/bin/python\" -c \"$1\" \"$2\"", PYTHON_ENV_SCRIPT,
           "import sys\n"
           "from safetensors.numpy import load_file\n"
           "w = load_file(sys.argv[1])\n"
           "print(sorted((k, v.shape) for k, v in w.items()))",
           merged() + "/model.safetensors"},
          {}, 120);
  ASSERT_EQ(read.exit_code, 0) << read.output;
  EXPECT_NE(read.output.find("('0.weight', (12, 5))"), std::string::npos) << read.output;
  EXPECT_NE(read.output.find("('2.weight', (3, 12))"), std::string::npos) << read.output;
}

TEST_F(MergeWeights, AFolderWithoutAnIndexOrWithAShardCutShortIsRefusedByName) {
  write_checkpoint("FULL_SHARD", 2);
  const auto no_index = merge(whole());
  EXPECT_EQ(no_index.exit_code, 2);
  EXPECT_NE(no_index.output.find("has no *.shards.json and no accel_state.json: it is not a "
                                 "save_state checkpoint"),
            std::string::npos)
      << no_index.output;
  const auto last = checkpoint() + "/model_shard_1.safetensors";
  std::filesystem::resize_file(last, std::filesystem::file_size(last) - 4);
  const auto cut = merge(checkpoint());
  EXPECT_EQ(cut.exit_code, 2);
  EXPECT_NE(cut.output.find(last), std::string::npos) << cut.output;
  EXPECT_FALSE(std::filesystem::exists(merged() + "/model.safetensors"));
}

}  // namespace
