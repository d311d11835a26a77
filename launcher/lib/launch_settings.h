#pragma once

// How `accel launch` arrives at its LaunchOptions: what the command line says, then (for the
// job's shape) what a scheduler's environment says, then the config file, then the defaults.

#include "config.h"
#include "fsdp_settings.h"
#include "launch.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

/// What `accel launch`'s command line says; an unset value comes from elsewhere (see
/// resolve_launch_options).
struct LaunchArgs {
  std::optional<std::string> config_file;
  std::optional<int> num_processes, num_machines, machine_rank, main_process_port;
  std::optional<int> gradient_accumulation_steps, max_restarts;
  std::optional<std::string> main_process_ip, mixed_precision, fp8_backend, gpu_ids;
  bool cpu = false;
  bool rank_prefix = false;
  std::optional<std::string> tee;
  double grace_period = 5.0;
  double monitor_interval = 0.1;
  /// --use_fsdp, --fsdp_*, --use_deepspeed, --zero_stage, ...: over the config file's values.
  ShardingFlags sharding;
  /// --use_parallelism_config and --parallelism_config_{dp_replicate,dp_shard,tp,cp,pp}_size (a
  /// size given implies the first): over the config file's parallelism_config.
  bool use_parallelism_config = false;
  std::optional<int> dp_replicate_size, dp_shard_size, tp_size, cp_size, pp_size;
};

/// An environment variable's value; nullopt when unset or empty.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
/// This process's environment.
std::optional<std::string> process_env(const std::string& name);

/// Where this launcher stands in a job a scheduler started, as the fields of a Config: under
/// `srun` (one launcher per node) SLURM's node count, this node's rank and the first node as the
/// main address; MASTER_ADDR and MASTER_PORT where set (a torchrun-style environment). A number
/// that is not whole throws std::invalid_argument naming the variable ("MASTER_PORT='29500x' is
/// not a whole number"), as the runtime refuses the same values.
Config job_environment(const EnvLookup& env = process_env);

/// The launch options: `args`, then `environment` (number of machines, machine rank, main address
/// and port: they differ per node while one config file serves them all), then `config`, then
/// the defaults. FSDP's wrap policy picks which of the config's unit settings applies. FSDP
/// settings accel does not carry out yet go to `warnings`. A contradiction among the flags throws
/// std::invalid_argument naming them.
LaunchOptions resolve_launch_options(const LaunchArgs& args, const Config& config,
                                     const Config& environment,
                                     std::vector<std::string>* warnings = nullptr);

}  // namespace launcher
}  // namespace accel
