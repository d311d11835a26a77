// Checkpoints across real processes started by our launcher: a run resumed from save_state ends
// bit-identical to an uninterrupted one (1 and 2 processes, mid-epoch, shuffled), and a process
// killed while saving leaves the previous checkpoint loadable.

#include "support/subprocess.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

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

INSTANTIATE_TEST_SUITE_P(Processes, CheckpointProcesses, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param); });

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
    auto saving = run({kWorker, "save-loop", checkpoint.string()}, {}, 120,
                      [&](pid_t pid) {
                        const auto give_up =
                            std::chrono::steady_clock::now() + std::chrono::seconds(60);
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
