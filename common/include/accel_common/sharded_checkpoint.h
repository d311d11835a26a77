#pragma once

// The index of a model saved with SHARDED_STATE_DICT (`model.shards.json` beside each process's
// `model_<rank>.safetensors`): the runtime writes and reads it (sharded_state_dict.cpp) and
// `accel merge-weights` reads it, so its names are defined once, here.

namespace accel {
namespace sharded_checkpoint {

/// The index's "format" value, also in each shard file's safetensors metadata.
inline constexpr const char kFormat[] = "accel-sharded-state-dict";
/// Beside the weights file's stem: model.safetensors -> model.shards.json.
inline constexpr const char kIndexSuffix[] = ".shards.json";

/// The index's keys.
namespace key {
inline constexpr const char kFormat[] = "format";
inline constexpr const char kNumProcesses[] = "num_processes";
inline constexpr const char kFiles[] = "files";  // the shard files, by rank
inline constexpr const char kUnits[] = "units";
inline constexpr const char kWhole[] = "whole";  // tensors kept whole, in the main file
inline constexpr const char kOrder[] = "order";  // every tensor's name, in the model's order
// A unit's:
inline constexpr const char kUnitKey[] = "key";
inline constexpr const char kDtype[] = "dtype";
inline constexpr const char kShardElements[] = "shard_elements";  // each process's slice
inline constexpr const char kParameters[] = "parameters";
// A parameter's, in its unit:
inline constexpr const char kName[] = "name";
inline constexpr const char kShape[] = "shape";
inline constexpr const char kOffset[] = "offset";
}  // namespace key

}  // namespace sharded_checkpoint
}  // namespace accel
