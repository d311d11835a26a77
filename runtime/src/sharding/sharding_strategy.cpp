// Accelerate's spellings of the sharding strategies and state dict types
// (accel/sharding_strategy.h).

#include <accel/sharding_strategy.h>

#include <accel_common/name_table.h>

#include <array>
#include <utility>

namespace accel {

namespace {

constexpr std::array<std::pair<ShardingStrategy, const char*>, 5> kStrategies = {{
    {ShardingStrategy::NoShard, "NO_SHARD"},
    {ShardingStrategy::ShardOptimizerState, "SHARD_OPTIMIZER_STATE"},
    {ShardingStrategy::ShardGradOp, "SHARD_GRAD_OP"},
    {ShardingStrategy::FullShard, "FULL_SHARD"},
    {ShardingStrategy::HybridShard, "HYBRID_SHARD"},
}};

constexpr std::array<std::pair<StateDictType, const char*>, 2> kStateDictTypes = {{
    {StateDictType::FullStateDict, "FULL_STATE_DICT"},
    {StateDictType::ShardedStateDict, "SHARDED_STATE_DICT"},
}};

}  // namespace

const char* to_string(ShardingStrategy strategy) { return name_in(kStrategies, strategy); }
const char* to_string(StateDictType type) { return name_in(kStateDictTypes, type); }

std::optional<ShardingStrategy> parse_sharding_strategy(std::string_view text) {
  return value_in<ShardingStrategy>(kStrategies, text);
}

std::optional<StateDictType> parse_state_dict_type(std::string_view text) {
  return value_in<StateDictType>(kStateDictTypes, text);
}

}  // namespace accel
