// Resharding on load, across real processes started by our launcher: a checkpoint saved by a
// sharding strategy on N processes resumes on M (with allow_process_count_change), into NO_SHARD
// (one process) and out of it, for the optimizer state of every strategy and for FULL_SHARD's
// SHARDED_STATE_DICT model files. The optimizer state right after the load is the saved state
// re-split, exactly; the training that follows ends where an uninterrupted N-process run does.

#include "support/subprocess.h"

#include <accel/safetensors.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;
using accel_test::run;

const std::string kAccel = ACCEL_CLI_PATH;
const std::string kWorker = RESHARD_WORKER_PATH;
const std::string kTwoMachines = LAUNCH_TWO_MACHINES_PATH;

struct Case {
  const char* saved_strategy;
  int saved_processes;
  const char* loaded_strategy;
  int loaded_processes;
  const char* state_dict_type = "FULL_STATE_DICT";
  /// Machines the processes are spread over (HYBRID_SHARD needs 2): two launchers on this host.
  int saved_machines = 1, loaded_machines = 1;
};

std::string name_of(const Case& c) {
  auto side = [](const char* strategy, int processes, int machines) {
    return std::string(strategy) + "_" +
           (machines > 1 ? std::to_string(machines) + "x" + std::to_string(processes / machines)
                         : std::to_string(processes));
  };
  return side(c.saved_strategy, c.saved_processes, c.saved_machines) + "_to_" +
         side(c.loaded_strategy, c.loaded_processes, c.loaded_machines) +
         (std::string(c.state_dict_type) == "SHARDED_STATE_DICT" ? "_sharded_state_dict" : "");
}

// gtest prints a parameter with this (the test's listing and its failures).
void PrintTo(const Case& c, std::ostream* out) { *out << name_of(c); }

class Resharding : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("accel_reshard_" + std::to_string(::getpid()) + "_" + name_of(GetParam()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  accel_test::RunResult launch(const char* strategy, int processes, int machines,
                               const std::vector<std::string>& args) {
    std::vector<std::string> argv =
        machines > 1
            ? std::vector<std::string>{kTwoMachines, kAccel, std::to_string(processes), kWorker}
            : std::vector<std::string>{kAccel, "launch", "--num_processes",
                                       std::to_string(processes), kWorker};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv,
               {{"ACCEL_TIMEOUT", "60"},
                {"ACCEL_SHARDING_STRATEGY", strategy},
                {"ACCEL_FSDP_STATE_DICT_TYPE", GetParam().state_dict_type}},
               240);
  }

  fs::path dir_;
};

/// The largest elementwise difference between two safetensors files of the same tensors.
double worst_difference(const fs::path& a, const fs::path& b) {
  const auto left = accel::load_safetensors(a.string());
  const auto right = accel::load_safetensors(b.string());
  EXPECT_EQ(left.size(), right.size());
  double worst = 0;
  for (const auto& [name, tensor] : left) {
    auto found = right.find(name);
    if (found == right.end()) {
      ADD_FAILURE() << b << " has no " << name;
      return 1e9;
    }
    worst = std::max(worst, (tensor - found->second).abs().max().item<double>());
  }
  return worst;
}

TEST_P(Resharding, ResumesOnAnotherProcessCountAsTheUninterruptedRun) {
  const auto& c = GetParam();
  // 16 micro-steps (8 optimizer steps), saved, then 12 more (6 optimizer steps).
  const auto straight = dir_ / "straight.safetensors";
  auto a = launch(c.saved_strategy, c.saved_processes, c.saved_machines,
                  {"train", "28", straight.string()});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto checkpoint = dir_ / "checkpoint";
  auto b = launch(c.saved_strategy, c.saved_processes, c.saved_machines,
                  {"save", "16", checkpoint.string()});
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto resumed = dir_ / "resumed.safetensors";
  auto d = launch(c.loaded_strategy, c.loaded_processes, c.loaded_machines,
                  {"resume", checkpoint.string(), "12", resumed.string()});
  ASSERT_EQ(d.exit_code, 0) << d.output;

  // The optimizer state as loaded is the saved one, re-split: exactly.
  const auto saved_state = accel::load_safetensors(checkpoint.string() + ".optimizer.safetensors");
  const auto loaded_state = accel::load_safetensors(resumed.string() + ".optimizer.safetensors");
  ASSERT_EQ(saved_state.size(), loaded_state.size());
  ASSERT_GT(saved_state.size(), 10u);
  for (const auto& [name, tensor] : saved_state) {
    ASSERT_EQ(loaded_state.count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(loaded_state.at(name), tensor)) << name;
  }
  const double difference = worst_difference(straight, resumed);
  EXPECT_LE(difference, 1e-5);
  std::printf("%s: largest weight difference from the uninterrupted run %.3g\n", name_of(c).c_str(),
              difference);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Resharding,
    ::testing::Values(Case{"SHARD_OPTIMIZER_STATE", 2, "SHARD_OPTIMIZER_STATE", 1},
                      Case{"SHARD_OPTIMIZER_STATE", 2, "SHARD_OPTIMIZER_STATE", 4},
                      Case{"SHARD_GRAD_OP", 4, "SHARD_GRAD_OP", 2},
                      Case{"FULL_SHARD", 2, "FULL_SHARD", 4},
                      Case{"FULL_SHARD", 4, "FULL_SHARD", 2, "SHARDED_STATE_DICT"},
                      Case{"FULL_SHARD", 2, "FULL_SHARD", 1, "SHARDED_STATE_DICT"},
                      Case{"NO_SHARD", 1, "FULL_SHARD", 2, "SHARDED_STATE_DICT"},
                      Case{"NO_SHARD", 2, "SHARD_GRAD_OP", 4},
                      Case{"HYBRID_SHARD", 4, "FULL_SHARD", 2, "FULL_STATE_DICT", 2, 1},
                      Case{"SHARD_GRAD_OP", 2, "HYBRID_SHARD", 4, "SHARDED_STATE_DICT", 1, 2}),
    [](const auto& info) { return name_of(info.param); });

}  // namespace
