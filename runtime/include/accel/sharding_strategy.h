#pragma once

// How a run is sharded (Accelerate's FSDP sharding strategies and state dict types), as
// `Accelerator::options()` gives them. Text is parsed into these once, where it is read
// (AcceleratorOptions, the config file, ACCEL_* variables); to_string gives Accelerate's
// spelling back.

#include <optional>
#include <ostream>
#include <string_view>

namespace accel {

enum class ShardingStrategy {
  NoShard,              ///< NO_SHARD: data parallel, every process holds everything
  ShardOptimizerState,  ///< SHARD_OPTIMIZER_STATE: ZeRO-1
  ShardGradOp,          ///< SHARD_GRAD_OP: ZeRO-2
  FullShard,            ///< FULL_SHARD: ZeRO-3, the parameters sharded too
  HybridShard,          ///< HYBRID_SHARD: FULL_SHARD within each machine, replicated across
};

enum class StateDictType {
  FullStateDict,     ///< FULL_STATE_DICT: checkpoints hold whole tensors
  ShardedStateDict,  ///< SHARDED_STATE_DICT: every process writes its own shards
};

/// "NO_SHARD", "SHARD_OPTIMIZER_STATE", ...
const char* to_string(ShardingStrategy strategy);
/// "FULL_STATE_DICT" or "SHARDED_STATE_DICT".
const char* to_string(StateDictType type);
/// The strategy Accelerate's spelling names; none for another text.
std::optional<ShardingStrategy> parse_sharding_strategy(std::string_view text);
std::optional<StateDictType> parse_state_dict_type(std::string_view text);

inline std::ostream& operator<<(std::ostream& out, ShardingStrategy strategy) {
  return out << to_string(strategy);
}
inline std::ostream& operator<<(std::ostream& out, StateDictType type) {
  return out << to_string(type);
}

// Until 0.x these were strings: comparing with the old spelling still compiles, for a release.
[[deprecated(
    "compare with an accel::ShardingStrategy, e.g. ShardingStrategy::FullShard")]] inline bool
operator==(ShardingStrategy strategy, std::string_view text) {
  return text == to_string(strategy);
}
[[deprecated(
    "compare with an accel::ShardingStrategy, e.g. ShardingStrategy::FullShard")]] inline bool
operator!=(ShardingStrategy strategy, std::string_view text) {
  return text != to_string(strategy);
}
[[deprecated(
    "compare with an accel::StateDictType, e.g. StateDictType::ShardedStateDict")]] inline bool
operator==(StateDictType type, std::string_view text) {
  return text == to_string(type);
}
[[deprecated(
    "compare with an accel::StateDictType, e.g. StateDictType::ShardedStateDict")]] inline bool
operator!=(StateDictType type, std::string_view text) {
  return text != to_string(type);
}

}  // namespace accel
