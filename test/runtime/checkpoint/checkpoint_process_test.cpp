// Checkpoints across real processes started by our launcher: a run resumed from save_state ends
// bit-identical to an uninterrupted one (1 and 2 processes, mid-epoch, shuffled), and a process
// killed while saving leaves the previous checkpoint loadable; with save_on_each_node, two
// "machines" (two launchers on this host, each with its own folder) each hold a whole checkpoint.

#include "support/ports.h"
#include "support/subprocess.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>
#include <tuple>

namespace {

namespace fs = std::filesystem;
using accel_test::run;

const std::string kAccel = ACCEL_CLI_PATH;
const std::string kWorker = CHECKPOINT_WORKER_PATH;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

class CheckpointProcesses : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("accel_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(GetParam()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  accel_test::RunResult launch(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kAccel, "launch", "--num_processes",
                                     std::to_string(GetParam()), kWorker};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, {{"ACCEL_TIMEOUT", "60"}}, 240);
  }

  fs::path dir_;
};

TEST_P(CheckpointProcesses, ResumedRunEqualsTheUninterruptedOne) {
  const auto straight = dir_ / "straight.safetensors";
  const auto resumed = dir_ / "resumed.safetensors";
  const auto checkpoint = dir_ / "checkpoint";
  auto a = launch({"train", "10", straight.string()});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // Step 5 is mid-epoch on 1 process (6 batches) and on 2 (3 batches each).
  auto b = launch({"save-at", "5", checkpoint.string()});
  ASSERT_EQ(b.exit_code, 0) << b.output;
  for (int rank = 0; rank < GetParam(); ++rank) {
    EXPECT_TRUE(fs::exists(checkpoint / ("random_states_" + std::to_string(rank) + ".pt")));
  }
  auto c = launch({"resume", checkpoint.string(), "5", resumed.string()});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const auto expected = read_bytes(straight);
  ASSERT_GT(expected.size(), 100u);
  EXPECT_TRUE(read_bytes(resumed) == expected)
      << "weights, Adam state, learning rate or generators differ after resuming";

  // A resumed run that skips the restore differs: the comparison can tell.
  auto fresh = launch({"train", "5", (dir_ / "five.safetensors").string()});
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_FALSE(read_bytes(dir_ / "five.safetensors") == expected);
}

TEST_P(CheckpointProcesses, LoadingWithAnotherProcessCountIsRefused) {
  const auto checkpoint = dir_ / "checkpoint";
  auto saved = launch({"save-at", "2", checkpoint.string()});
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const int other = GetParam() == 1 ? 2 : 1;
  auto result = run({kAccel, "launch", "--num_processes", std::to_string(other), kWorker, "resume",
                     checkpoint.string(), "1", (dir_ / "x").string()},
                    {{"ACCEL_TIMEOUT", "60"}}, 240);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("was saved by " + std::to_string(GetParam()) +
                               " processes and this job has " + std::to_string(other)),
            std::string::npos)
      << result.output;
}

std::vector<double> remaining_targets(const std::string& output) {
  std::smatch line;
  if (!std::regex_search(output, line, std::regex(R"(remaining:([^\n]*))"))) return {};
  std::istringstream values(line[1].str());
  std::vector<double> out;
  for (double value; values >> value;) out.push_back(value);
  return out;
}

TEST_P(CheckpointProcesses, AllowedProcessCountChangeResumesTheRestOfTheEpoch) {
  // 48 samples in batches of 8: 6 batches an epoch. Step 5 is mid-epoch on 1 process (batch 5
  // of 6) and on 2 (each at its batch 2 of 3, global batches 4 and 5 left).
  const auto checkpoint = dir_ / "checkpoint";
  auto saved = launch({"save-and-list", "5", checkpoint.string()});
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const auto expected = remaining_targets(saved.output);
  ASSERT_FALSE(expected.empty()) << saved.output;

  const int other = GetParam() == 1 ? 2 : 1;
  auto loaded = run({kAccel, "launch", "--num_processes", std::to_string(other), kWorker,
                     "load-and-list", checkpoint.string()},
                    {{"ACCEL_TIMEOUT", "60"}}, 240);
  ASSERT_EQ(loaded.exit_code, 0) << loaded.output;
  EXPECT_NE(loaded.output.find("saved by " + std::to_string(GetParam()) + " processes, into " +
                               std::to_string(other)),
            std::string::npos)
      << loaded.output;
  const auto actual = remaining_targets(loaded.output);
  // Every sample the saved run had not reached comes; earlier ones only to complete the round
  // the resume starts in (1 -> 2 processes: global batch 4 again; 2 -> 1: nothing again).
  EXPECT_TRUE(std::includes(actual.begin(), actual.end(), expected.begin(), expected.end()))
      << saved.output << "\n"
      << loaded.output;
  EXPECT_EQ(actual.size(), GetParam() == 1 ? expected.size() + 8 : expected.size());
  EXPECT_EQ(expected.size(), GetParam() == 1 ? 8u : 16u);
}

INSTANTIATE_TEST_SUITE_P(Processes, CheckpointProcesses, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param); });

// A checkpoint saved on any micro-step, from inside accumulate(), inside an accumulation window or
// on its synchronising step, loads into a fresh process and resumes bit for bit, under every
// strategy; the loop clips on every micro-step. Accumulation 4 over epochs of 6 batches (1
// process) or 3 (2 processes): windows end on the 4th micro-step and at the end of each epoch.
class MidWindowCheckpoints : public ::testing::TestWithParam<std::tuple<int, const char*>> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("accel_window_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(processes()) + std::get<1>(GetParam()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  int processes() const { return std::get<0>(GetParam()); }

  accel_test::RunResult launch(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kAccel, "launch", "--num_processes",
                                     std::to_string(processes()), kWorker};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv,
               {{"ACCEL_TIMEOUT", "60"},
                {"ACCEL_GRADIENT_ACCUMULATION_STEPS", "4"},
                {"ACCEL_SHARDING_STRATEGY", std::get<1>(GetParam())}},
               240);
  }

  fs::path dir_;
};

TEST_P(MidWindowCheckpoints, EveryMicroStepResumesBitForBit) {
  constexpr int kSteps = 7;
  const auto straight = dir_ / "straight.safetensors";
  auto a = launch({"train", std::to_string(kSteps), straight.string()});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = launch({"save-each", std::to_string(kSteps), (dir_ / "saves").string()});
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto expected = read_bytes(straight);
  ASSERT_GT(expected.size(), 100u);
  const int epoch = 6 / processes();
  int windows = 0;
  for (int k = 1; k < kSteps; ++k) {
    const auto checkpoint = dir_ / "saves" / ("step_" + std::to_string(k));
    // Inside a window each process keeps what it accumulated; on a synchronising step, nothing.
    const int in_epoch = (k - 1) % epoch + 1;
    const bool inside = in_epoch % 4 != 0 && in_epoch != epoch;
    windows += inside;
    for (int rank = 0; rank < processes(); ++rank) {
      EXPECT_EQ(
          fs::exists(checkpoint / ("window_gradients_" + std::to_string(rank) + ".safetensors")),
          inside)
          << "micro-step " << k;
    }
    const auto resumed = dir_ / ("resumed_" + std::to_string(k) + ".safetensors");
    auto c = launch({"resume", checkpoint.string(), std::to_string(kSteps - k), resumed.string()});
    ASSERT_EQ(c.exit_code, 0) << "micro-step " << k << "\n" << c.output;
    EXPECT_TRUE(read_bytes(resumed) == expected)
        << "resumed from micro-step " << k << ": weights, Adam state, learning rate or "
        << "generators differ from the uninterrupted run";
  }
  EXPECT_GE(windows, 3);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, MidWindowCheckpoints,
    ::testing::Values(std::make_tuple(1, "NO_SHARD"), std::make_tuple(2, "NO_SHARD"),
                      std::make_tuple(2, "SHARD_OPTIMIZER_STATE"),
                      std::make_tuple(2, "SHARD_GRAD_OP"), std::make_tuple(2, "FULL_SHARD")),
    [](const auto& info) {
      return std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
    });

// Two launchers on this host, one per machine, 2 processes each: a 4-process job. Each machine is
// given its own arguments, as each real machine would name a folder on its own disk.
std::pair<accel_test::RunResult, accel_test::RunResult> launch_two_machines(
    const std::vector<std::string>& machine0_args, const std::vector<std::string>& machine1_args,
    const std::map<std::string, std::string>& env) {
  const std::string port = std::to_string(accel_test::free_port());
  auto launch = [&](int machine, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kAccel,
                                     "launch",
                                     "--num_processes",
                                     "4",
                                     "--num_machines",
                                     "2",
                                     "--machine_rank",
                                     std::to_string(machine),
                                     "--main_process_ip",
                                     "127.0.0.1",
                                     "--main_process_port",
                                     port,
                                     kWorker};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, env, 240);
  };
  accel_test::RunResult first;
  std::thread machine0([&] { first = launch(0, machine0_args); });
  auto second = launch(1, machine1_args);
  machine0.join();
  return {first, second};
}

TEST(CheckpointNodes, SaveOnEachNodeLeavesAWholeCheckpointOnEveryMachine) {
  const auto dir = fs::temp_directory_path() / ("accel_nodes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const fs::path node[2] = {dir / "node0", dir / "node1"};
  for (const auto& folder : node) fs::create_directories(folder);
  const std::map<std::string, std::string> env = {{"ACCEL_TIMEOUT", "60"},
                                                  {"CHECKPOINT_SAVE_ON_EACH_NODE", "1"}};

  auto straight = run({kAccel, "launch", "--num_processes", "4", kWorker, "train", "10",
                       (dir / "straight.safetensors").string()},
                      env, 240);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;

  // Step 5 is mid-epoch: 6 batches over 4 processes are 2 steps an epoch.
  auto saved = launch_two_machines({"save-at", "5", (node[0] / "checkpoint").string()},
                                   {"save-at", "5", (node[1] / "checkpoint").string()}, env);
  ASSERT_EQ(saved.first.exit_code, 0) << saved.first.output;
  ASSERT_EQ(saved.second.exit_code, 0) << saved.second.output;
  for (int machine = 0; machine < 2; ++machine) {
    const auto checkpoint = node[machine] / "checkpoint";
    for (const char* file : {"accel_state.json", "model.safetensors", "optimizer.pt",
                             "scheduler.pt", "data_loader.pt"}) {
      EXPECT_TRUE(fs::exists(checkpoint / file)) << checkpoint / file;
    }
    // Each process's generators on its own machine only.
    for (int rank = 0; rank < 4; ++rank) {
      const auto rng = checkpoint / ("random_states_" + std::to_string(rank) + ".pt");
      EXPECT_EQ(fs::exists(rng), rank / 2 == machine) << rng;
    }
    EXPECT_FALSE(fs::exists(checkpoint.string() + ".partial"));
  }

  auto resumed = launch_two_machines({"resume", (node[0] / "checkpoint").string(), "5",
                                      (node[0] / "resumed.safetensors").string()},
                                     {"resume", (node[1] / "checkpoint").string(), "5",
                                      (node[1] / "resumed.safetensors").string()},
                                     env);
  ASSERT_EQ(resumed.first.exit_code, 0) << resumed.first.output;
  ASSERT_EQ(resumed.second.exit_code, 0) << resumed.second.output;
  const auto expected = read_bytes(dir / "straight.safetensors");
  ASSERT_GT(expected.size(), 100u);
  EXPECT_TRUE(read_bytes(node[0] / "resumed.safetensors") == expected)
      << "a run resumed on two machines from their own folders differs from the straight run";

  // Without save_on_each_node, the second machine has no folder to write its generators into.
  auto shared = launch_two_machines({"save-at", "1", (node[0] / "shared").string()},
                                    {"save-at", "1", (node[1] / "shared").string()},
                                    {{"ACCEL_TIMEOUT", "60"}});
  EXPECT_NE(shared.second.exit_code, 0);
  EXPECT_NE(shared.second.output.find("machines that do not share a filesystem need "
                                      "project_configuration().save_on_each_node(true)"),
            std::string::npos)
      << shared.second.output;
  fs::remove_all(dir);
}

TEST(CheckpointCrash, KilledWhileSavingLeavesTheLastCompleteCheckpoint) {
  const auto dir = fs::temp_directory_path() / ("accel_crash_" + std::to_string(::getpid()));
  int killed_mid_save = 0;
  // Kill points spread over a few saves (each writes 32 MB), counted from the end of the first
  // save, so a slow machine or a sanitizer build shifts them alike.
  for (int delay_ms : {0, 50, 120, 200, 300, 420}) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    const auto checkpoint = dir / "checkpoint";
    bool partial_at_kill = false;
    auto saving = run(
        {kWorker, "save-loop", checkpoint.string()}, {}, 120,
        [&](pid_t pid) {
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
          while (!fs::exists(checkpoint / "accel_state.json") &&
                 std::chrono::steady_clock::now() < give_up) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
          partial_at_kill = fs::exists(checkpoint.string() + ".partial");
          ::kill(pid, SIGKILL);
        },
        0.01);
    ASSERT_EQ(saving.exit_code, 128 + SIGKILL) << saving.output;
    static const std::regex saved_line(R"(saved (\d+))");
    int saved = 0;
    for (std::sregex_iterator it(saving.output.begin(), saving.output.end(), saved_line);
         it != std::sregex_iterator(); ++it) {
      saved = std::stoi((*it)[1].str());
    }
    killed_mid_save += partial_at_kill ? 1 : 0;
    auto check = run({kWorker, "check", checkpoint.string()}, {}, 120);
    ASSERT_EQ(check.exit_code, 0) << "killed " << delay_ms << " ms after the first save:\n"
                                  << check.output;
    std::smatch value;
    ASSERT_TRUE(std::regex_search(check.output, value, std::regex(R"(consistent (\d+))")));
    // The last save printed, or the one after it if it completed just before the kill.
    const int loaded = std::stoi(value[1].str());
    EXPECT_TRUE(loaded == saved || loaded == saved + 1) << loaded << " vs " << saved;
  }
  fs::remove_all(dir);
  EXPECT_GT(killed_mid_save, 0) << "no kill landed inside a save: the test did not test";
}

}  // namespace
