#pragma once

// The launcher's YAML config file. Keys follow Accelerate's default_config.yaml where the meaning
// is the same, so an existing Accelerate config works here.

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

struct Config {
  std::optional<std::string> distributed_type;  // NO, MULTI_CPU, MULTI_GPU
  std::optional<int> num_processes;             // the whole job
  std::optional<int> num_machines;
  std::optional<int> machine_rank;
  std::optional<std::string> main_process_ip;
  std::optional<int> main_process_port;
  std::optional<std::string> mixed_precision;  // no, bf16, fp16, fp8
  /// fp8_config's backend (TE, MSAMP or AO): exported as ACCEL_FP8_BACKEND, which the runtime
  /// checks (accel's FP8 is AO's recipes).
  std::optional<std::string> fp8_backend;
  std::optional<std::string> gpu_ids;  // "all" or "0,1,..."
  std::optional<bool> use_cpu;
  std::optional<int> gradient_accumulation_steps;
  /// max_restarts: how often `accel launch` restarts a failed group.
  std::optional<int> max_restarts;
  /// ddp_find_unused_parameters and ddp_static_graph (accel's keys; Accelerate takes them in code,
  /// as DistributedDataParallelKwargs): exported as ACCEL_DDP_FIND_UNUSED_PARAMETERS and
  /// ACCEL_DDP_STATIC_GRAPH.
  std::optional<bool> find_unused_parameters;
  std::optional<bool> static_graph;
  /// ddp_comm_hook: no, fp16 or bf16 (exported as ACCEL_DDP_COMM_HOOK).
  std::optional<std::string> comm_hook;
  /// Accelerate's fsdp_config.fsdp_sharding_strategy: NO_SHARD, SHARD_GRAD_OP, FULL_SHARD,
  /// HYBRID_SHARD (or SHARD_OPTIMIZER_STATE, accel's name for ZeRO-1).
  std::optional<std::string> sharding_strategy;
  /// fsdp_config.fsdp_transformer_layer_cls_to_wrap: FULL_SHARD's unit classes, comma-separated.
  std::optional<std::string> classes_to_wrap;
  /// fsdp_config.fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP (units by class, the default),
  /// SIZE_BASED_WRAP (by fsdp_min_num_params) or NO_WRAP (accel's own units).
  std::optional<std::string> auto_wrap_policy;
  /// fsdp_config.fsdp_min_num_params: the size-based policy's threshold.
  std::optional<int> min_num_params;
  /// log_with: the built-in trackers to start, comma-separated (exported as ACCEL_LOG_WITH).
  std::optional<std::string> log_with;
  /// fsdp_config.fsdp_state_dict_type: FULL_STATE_DICT or SHARDED_STATE_DICT.
  std::optional<std::string> state_dict_type;
  /// fsdp_config.fsdp_offload_params, or deepspeed_config.offload_optimizer_device /
  /// offload_param_device set to cpu: CPU offload of the shards (exported as
  /// ACCEL_FSDP_OFFLOAD_PARAMS).
  std::optional<bool> offload_params;
  /// fsdp_config.fsdp_version: 1 or 2; it says how fsdp_reshard_after_forward is read (see
  /// fsdp_settings.h), which sets sharding_strategy.
  std::optional<int> fsdp_version;
  /// fsdp_config.fsdp_activation_checkpointing.
  std::optional<bool> activation_checkpointing;
  /// fsdp_config.fsdp_cpu_ram_efficient_loading and fsdp_sync_module_states.
  std::optional<bool> cpu_ram_efficient_loading, sync_module_states;
  /// fsdp_config.fsdp_backward_prefetch: BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH.
  std::optional<std::string> backward_prefetch;
  /// fsdp_config.fsdp_forward_prefetch.
  std::optional<bool> forward_prefetch;
  /// fsdp_config.fsdp_use_orig_params: accepted; accel's sharded parameters are always the
  /// model's own tensors, which is what it asks for.
  std::optional<bool> use_orig_params;
  /// parallelism_config: the device mesh's sizes, under Accelerate 1.15's keys (which keep their
  /// prefix: parallelism_config_tp_size), exported as ACCELERATE_USE_PARALLELISM_CONFIG=true and
  /// PARALLELISM_CONFIG_*_SIZE.
  std::optional<int> dp_replicate_size, dp_shard_size, tp_size, cp_size, pp_size;
  /// distributed_type FSDP or DEEPSPEED (or --use_fsdp, --use_deepspeed) with no strategy given:
  /// Accelerate's default then applies (FULL_SHARD; ZeRO stage 2).
  std::optional<std::string> default_strategy;
};

/// A config file that cannot be used; what() names the file, the key and what was expected.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Reads and validates `path`. Unknown keys are reported through `warnings`, not dropped
/// silently. Throws ConfigError.
Config load_config(const std::string& path, std::vector<std::string>* warnings);

/// Writes `config` as YAML to `path`, creating its folder; atomically (temp file + rename).
void save_config(const Config& config, const std::string& path);

/// The YAML text of `config`.
std::string to_yaml(const Config& config);

/// $ACCEL_HOME/default_config.yaml, else $XDG_CACHE_HOME/accel/default_config.yaml, else
/// ~/.cache/accel/default_config.yaml.
std::string default_config_path();

}  // namespace launcher
}  // namespace accel
