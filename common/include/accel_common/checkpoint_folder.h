#pragma once

// The names in a save_state folder that another program reads too: the runtime writes them
// (runtime/src/checkpoint/) and `accel merge-weights` reads a FULL_STATE_DICT folder's whole
// weights by them, so they are defined once, here.

#include <cstddef>
#include <string>

namespace accel {
namespace checkpoint_folder {

/// The folder's summary, written last: a folder without it was never completed.
inline constexpr const char kStateFile[] = "accel_state.json";

/// The summary's keys.
namespace key {
inline constexpr const char kStateDictType[] = "state_dict_type";  // FULL_ or SHARDED_STATE_DICT
inline constexpr const char kModels[] = "models";                  // how many models it holds
}  // namespace key

/// Model `index`'s whole weights: model.safetensors, model_1.safetensors, ...
inline std::string model_file(size_t index) {
  return index == 0 ? "model.safetensors" : "model_" + std::to_string(index) + ".safetensors";
}

}  // namespace checkpoint_folder
}  // namespace accel
