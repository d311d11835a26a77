#pragma once

// Accelerate's FSDP and DeepSpeed settings, from either place Accelerate takes them: a config
// file's fsdp_config / deepspeed_config, and `accelerate launch`'s flags (--use_fsdp,
// --fsdp_reshard_after_forward, --zero_stage, ...). Accelerate 1.15 names the strategy by
// fsdp_reshard_after_forward, read by fsdp_version: version 1 takes FSDP's strategy names,
// version 2 a boolean (true: FULL_SHARD, false: SHARD_GRAD_OP). The older fsdp_sharding_strategy
// still works.

#include "config.h"

#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

/// `accel launch`'s FSDP and DeepSpeed flags as given; each is unset unless on the command line.
struct ShardingFlags {
  bool use_fsdp = false;
  bool use_deepspeed = false;
  std::optional<std::string> fsdp_version, sharding_strategy, reshard_after_forward, offload_params,
      auto_wrap_policy, classes_to_wrap, state_dict_type, activation_checkpointing,
      backward_prefetch, forward_prefetch, use_orig_params, cpu_ram_efficient_loading,
      sync_module_states, offload_optimizer_device, offload_param_device;
  std::optional<int> min_num_params, zero_stage;
};

/// The strategy `value` of fsdp_reshard_after_forward names under `fsdp_version`; nullopt when
/// it names none, with what is allowed in `expected`.
std::optional<std::string> strategy_of_reshard_after_forward(const std::string& value,
                                                             int fsdp_version,
                                                             std::string* expected);

/// The flags as a Config's FSDP fields, checked: a value that is not allowed, or two flags
/// that contradict each other, throw std::invalid_argument naming the flags. `file_version` is
/// the config file's fsdp_version, which reads --fsdp_reshard_after_forward when no
/// --fsdp_version is given.
Config config_of_flags(const ShardingFlags& flags, std::optional<int> file_version);

/// `flags` over `file`: a setting on the command line wins (as for every other setting).
Config merge_sharding(const Config& flags, const Config& file);

/// What the job asks of FSDP that accel does not do yet, one warning each (none is dropped
/// silently).
std::vector<std::string> unapplied_fsdp_settings(const Config& config);

}  // namespace launcher
}  // namespace accel
