// The launcher's answer to a command line it cannot take, called as a library.

#include "command_line.h"

#include <gtest/gtest.h>

namespace {

using accel::launcher::nearest_option;
using accel::launcher::unknown_option_message;

const std::vector<std::string> kLaunchOptions = {
    "--config_file",     "--num_processes",
    "--num_machines",    "--machine_rank",
    "--main_process_ip", "--main_process_port",
    "--mixed_precision", "--gradient_accumulation_steps",
    "--gpu_ids",         "--cpu",
    "--rank_prefix",     "--tee",
    "--grace_period",    "--max_restarts",
    "--monitor_interval"};

TEST(CommandLine, ATypoIsAnsweredWithTheOptionMeant) {
  EXPECT_EQ(nearest_option("--max_restart", kLaunchOptions), "--max_restarts");
  EXPECT_EQ(nearest_option("--max-restarts", kLaunchOptions), "--max_restarts");  // dashes
  EXPECT_EQ(nearest_option("--num_process", kLaunchOptions), "--num_processes");
  EXPECT_EQ(nearest_option("--mixed-precission", kLaunchOptions), "--mixed_precision");
  EXPECT_EQ(nearest_option("--cpus", kLaunchOptions), "--cpu");
}

TEST(CommandLine, NothingNearIsNoSuggestion) {
  EXPECT_EQ(nearest_option("--bogus_opt", kLaunchOptions), std::nullopt);
  EXPECT_EQ(nearest_option("-x", kLaunchOptions), std::nullopt);
  EXPECT_EQ(nearest_option("--nproc_per_node", kLaunchOptions), std::nullopt);
}

TEST(CommandLine, TheMessageNamesTheOptionWithoutItsValue) {
  EXPECT_EQ(unknown_option_message("--max_restart=3", kLaunchOptions),
            "unknown option '--max_restart'; did you mean --max_restarts?");
  EXPECT_EQ(unknown_option_message("--bogus_opt", kLaunchOptions),
            "unknown option '--bogus_opt' (options come before the program; --help lists them)");
}

}  // namespace
