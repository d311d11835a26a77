#pragma once

// `accel launch`: starts this machine's share of a job's processes with the torchrun environment,
// watches them, and stops the whole group when one fails or the launcher is interrupted.

#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

struct LaunchOptions {
  /// Processes in the whole job, as in Accelerate: each machine starts
  /// num_processes / num_machines of them.
  int num_processes = 1;
  int num_machines = 1;
  int machine_rank = 0;
  std::string main_process_ip = "127.0.0.1";
  /// Unset: a free port for a one-machine job, 29500 for several machines.
  std::optional<int> main_process_port;
  std::optional<std::string> mixed_precision;
  std::optional<std::string> fp8_backend;  // exported as ACCEL_FP8_BACKEND
  std::optional<int> gradient_accumulation_steps;
  bool cpu = false;
  /// Exported as ACCEL_SHARDING_STRATEGY.
  std::optional<std::string> sharding_strategy;
  /// Exported as ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP.
  std::optional<std::string> classes_to_wrap;
  /// Exported as ACCEL_FSDP_MIN_NUM_PARAMS.
  std::optional<int> min_num_params;
  /// Exported as ACCEL_LOG_WITH.
  std::optional<std::string> log_with;
  /// Exported as ACCEL_FSDP_STATE_DICT_TYPE.
  std::optional<std::string> state_dict_type;
  /// Exported as ACCEL_FSDP_OFFLOAD_PARAMS.
  std::optional<bool> offload_params;
  /// ACCEL_FSDP_ACTIVATION_CHECKPOINTING: checkpoint the units' activations.
  std::optional<bool> activation_checkpointing;
  /// ACCEL_DDP_FIND_UNUSED_PARAMETERS and ACCEL_DDP_STATIC_GRAPH.
  std::optional<bool> find_unused_parameters;
  std::optional<bool> static_graph;
  std::optional<std::string> comm_hook;  // ACCEL_DDP_COMM_HOOK
  /// ACCEL_FSDP_FORWARD_PREFETCH and ACCEL_FSDP_BACKWARD_PREFETCH.
  std::optional<bool> forward_prefetch;
  std::optional<std::string> backward_prefetch;
  /// The device mesh (dp_replicate, dp_shard, tp, cp, pp sizes), exported as
  /// ACCELERATE_USE_PARALLELISM_CONFIG=true and PARALLELISM_CONFIG_*_SIZE; unset: none.
  struct MeshSizes {
    int dp_replicate = 1, dp_shard = 1, tp = 1, cp = 1, pp = 1;
    int product() const { return dp_replicate * dp_shard * tp * cp * pp; }
  };
  std::optional<MeshSizes> parallelism;
  /// "all", or the CUDA devices to use ("0,1"), exported as CUDA_VISIBLE_DEVICES.
  std::optional<std::string> gpu_ids;
  /// Prefix every line a process writes with "[rank N] ".
  bool rank_prefix = false;
  /// When set, each process's output is also written to <tee_dir>/rank_<N>.log.
  std::optional<std::string> tee_dir;
  /// Seconds between SIGTERM and SIGKILL when the job is stopped.
  double grace_period = 5.0;
  /// How often a failed group (a process that exited non-zero, was killed, or was stopped) is
  /// started again, whole, before the launcher gives up (torchrun's --max_restarts).
  int max_restarts = 0;
  /// Seconds between the launcher's checks of its processes (torchrun's --monitor_interval).
  double monitor_interval = 0.1;
  /// The program and its arguments.
  std::vector<std::string> command;
};

/// Checks `options`; returns an error message, or nothing when they are usable.
std::optional<std::string> validate(const LaunchOptions& options);

/// Runs the job and returns the launcher's exit code: 0 when every process exited 0, else the
/// first failing process's exit code (128 + signal number for a signal) in the last attempt. A
/// failed group is restarted up to max_restarts times; an interrupted one (SIGINT, SIGTERM,
/// SIGHUP to the launcher) never is.
int launch(const LaunchOptions& options);

/// A TCP port on this machine that nothing listens on now.
int find_free_port();
/// True when `port` can be bound on this machine now.
bool port_is_free(int port);

}  // namespace launcher
}  // namespace accel
