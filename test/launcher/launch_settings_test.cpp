// accel launch's option resolution, called directly: command line, then the scheduler's
// environment, then the config file, then the defaults; and the environment's numbers parsed
// whole.

#include "launch_settings.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>

namespace {

using accel::launcher::Config;
using accel::launcher::job_environment;
using accel::launcher::LaunchArgs;
using accel::launcher::resolve_launch_options;

/// An environment holding exactly `values`.
accel::launcher::EnvLookup environment(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const std::string& name) -> std::optional<std::string> {
    auto found = values.find(name);
    if (found == values.end() || found->second.empty()) return std::nullopt;
    return found->second;
  };
}

TEST(LaunchSettings, CommandLineThenEnvironmentThenConfigThenDefaults) {
  Config config;
  config.num_machines = 4;
  config.machine_rank = 3;
  config.main_process_ip = "10.0.0.9";
  config.num_processes = 16;
  config.mixed_precision = "fp16";
  config.max_restarts = 2;
  Config env;
  env.machine_rank = 1;
  env.main_process_ip = "node01";
  LaunchArgs args;
  args.mixed_precision = "bf16";

  auto options = resolve_launch_options(args, config, env);
  EXPECT_EQ(options.num_machines, 4);  // the config (the environment has none)
  EXPECT_EQ(options.machine_rank, 1);  // the environment over the config
  EXPECT_EQ(options.main_process_ip, "node01");
  EXPECT_EQ(options.num_processes, 16);
  EXPECT_EQ(options.mixed_precision, "bf16");  // the command line over the config
  EXPECT_EQ(options.max_restarts, 2);

  args.machine_rank = 0;
  args.main_process_ip = "127.0.0.2";
  options = resolve_launch_options(args, config, env);
  EXPECT_EQ(options.machine_rank, 0);  // the command line over the environment
  EXPECT_EQ(options.main_process_ip, "127.0.0.2");

  options = resolve_launch_options(LaunchArgs(), Config(), Config());
  EXPECT_EQ(options.num_machines, 1);
  EXPECT_EQ(options.num_processes, 1);
  EXPECT_EQ(options.machine_rank, 0);
  EXPECT_EQ(options.main_process_ip, "127.0.0.1");
  EXPECT_FALSE(options.main_process_port.has_value());
  EXPECT_EQ(options.max_restarts, 0);
  EXPECT_FALSE(options.cpu);
}

TEST(LaunchSettings, ProcessesDefaultToOnePerMachineAndMultiCpuRunsOnTheCpu) {
  Config config;
  config.num_machines = 3;
  config.distributed_type = "MULTI_CPU";
  const auto options = resolve_launch_options(LaunchArgs(), config, Config());
  EXPECT_EQ(options.num_processes, 3);
  EXPECT_TRUE(options.cpu);
}

TEST(LaunchSettings, TheWrapPolicyPicksWhichUnitSettingApplies) {
  Config config;
  config.classes_to_wrap = "Block";
  config.min_num_params = 1000;
  auto options = resolve_launch_options(LaunchArgs(), config, Config());  // transformer policy
  EXPECT_EQ(options.classes_to_wrap, std::optional<std::string>("Block"));
  EXPECT_FALSE(options.min_num_params.has_value());

  config.auto_wrap_policy = "SIZE_BASED_WRAP";
  options = resolve_launch_options(LaunchArgs(), config, Config());
  EXPECT_FALSE(options.classes_to_wrap.has_value());
  EXPECT_EQ(options.min_num_params, std::optional<int>(1000));

  config.min_num_params.reset();  // Accelerate's default threshold
  options = resolve_launch_options(LaunchArgs(), config, Config());
  EXPECT_EQ(options.min_num_params, std::optional<int>(100000000));

  config.auto_wrap_policy = "NO_WRAP";
  options = resolve_launch_options(LaunchArgs(), config, Config());
  EXPECT_FALSE(options.classes_to_wrap.has_value());
  EXPECT_FALSE(options.min_num_params.has_value());
}

TEST(LaunchSettings, SlurmGivesTheJobsShapeAndMasterAddrOverridesItsHost) {
  auto e = job_environment(environment({{"SLURM_JOB_ID", "7"},
                                        {"SLURM_NNODES", "3"},
                                        {"SLURM_NODEID", "2"},
                                        {"SLURM_JOB_NODELIST", "gpu[07-09]"}}));
  EXPECT_EQ(e.num_machines, std::optional<int>(3));
  EXPECT_EQ(e.machine_rank, std::optional<int>(2));
  EXPECT_EQ(e.main_process_ip, std::optional<std::string>("gpu07"));
  EXPECT_FALSE(e.main_process_port.has_value());

  e = job_environment(environment({{"SLURM_JOB_ID", "7"},
                                   {"SLURM_NNODES", "2"},
                                   {"SLURM_NODEID", "0"},
                                   {"SLURM_NODELIST", "a,b"},
                                   {"MASTER_ADDR", "10.1.1.1"},
                                   {"MASTER_PORT", "29600"}}));
  EXPECT_EQ(e.main_process_ip, std::optional<std::string>("10.1.1.1"));
  EXPECT_EQ(e.main_process_port, std::optional<int>(29600));

  // Outside a SLURM job its variables say nothing about this launch.
  e = job_environment(environment({{"SLURM_NNODES", "5"}}));
  EXPECT_FALSE(e.num_machines.has_value());
}

TEST(LaunchSettings, NumbersInTheEnvironmentAreParsedWhole) {
  for (const char* bad : {"29500x", "29500 ", "0x10", "", "99999999999"}) {
    SCOPED_TRACE(bad);
    if (std::string(bad).empty()) {
      EXPECT_FALSE(job_environment(environment({{"MASTER_PORT", bad}})).main_process_port);
      continue;
    }
    try {
      job_environment(environment({{"MASTER_PORT", bad}}));
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_EQ(std::string(error.what()),
                "MASTER_PORT='" + std::string(bad) + "' is not a whole number");
    }
  }
  EXPECT_THROW(job_environment(environment(
                   {{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "one"}})),
               std::invalid_argument);
}

TEST(LaunchSettings, ReshardAfterForwardIsReadByFsdpVersion) {
  using accel::launcher::strategy_of_reshard_after_forward;
  std::string expected;
  EXPECT_EQ(strategy_of_reshard_after_forward("SHARD_GRAD_OP", 1, &expected), "SHARD_GRAD_OP");
  EXPECT_EQ(strategy_of_reshard_after_forward("full_shard", 1, &expected), "FULL_SHARD");
  EXPECT_EQ(strategy_of_reshard_after_forward("3", 1, &expected), "NO_SHARD");  // FSDP's numbers
  EXPECT_EQ(strategy_of_reshard_after_forward("true", 2, &expected), "FULL_SHARD");
  EXPECT_EQ(strategy_of_reshard_after_forward("False", 2, &expected), "SHARD_GRAD_OP");
  EXPECT_FALSE(strategy_of_reshard_after_forward("true", 1, &expected));
  EXPECT_NE(expected.find("fsdp_version 2's"), std::string::npos) << expected;
  EXPECT_FALSE(strategy_of_reshard_after_forward("FULL_SHARD", 2, &expected));
  EXPECT_FALSE(strategy_of_reshard_after_forward("HYBRID_SHARD_ZERO2", 1, &expected));
  EXPECT_NE(expected.find("not offered by accel"), std::string::npos) << expected;
}

TEST(LaunchSettings, ShardingFlagsWinOverTheConfigAndContradictionsAreRefused) {
  Config file;
  file.sharding_strategy = "SHARD_GRAD_OP";
  file.fsdp_version = 2;
  file.offload_params = true;
  LaunchArgs args;
  args.sharding.reshard_after_forward = "true";  // read as the file's version 2
  const auto options = resolve_launch_options(args, file, Config());
  EXPECT_EQ(options.sharding_strategy, "FULL_SHARD");
  EXPECT_EQ(options.offload_params, true);
  // --use_fsdp alone: Accelerate's default strategy.
  LaunchArgs use_fsdp;
  use_fsdp.sharding.use_fsdp = true;
  EXPECT_EQ(resolve_launch_options(use_fsdp, Config(), Config()).sharding_strategy, "FULL_SHARD");
  LaunchArgs both;
  both.sharding.sharding_strategy = "FULL_SHARD";
  both.sharding.reshard_after_forward = "SHARD_GRAD_OP";
  try {
    resolve_launch_options(both, Config(), Config());
    FAIL() << "expected the two flags to be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("contradicts --fsdp_sharding_strategy"), std::string::npos)
        << e.what();
  }
  LaunchArgs stage;
  stage.sharding.use_deepspeed = true;
  stage.sharding.zero_stage = 4;
  EXPECT_THROW(resolve_launch_options(stage, Config(), Config()), std::invalid_argument);
}

}  // namespace
