#pragma once

// accel merge-weights: a SHARDED_STATE_DICT checkpoint (see runtime/src/sharded_state_dict.h)
// turned into whole weights, by reading the shard files as bytes: no LibTorch, no process per
// rank.

#include <stdexcept>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

/// A checkpoint that cannot be merged; what() names the file and the problem.
class MergeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// For each model index in `checkpoint_dir` (model.shards.json, model_1.shards.json, ...),
/// writes its whole weights as `output_dir`/model.safetensors (model_1.safetensors, ...), in the
/// model's order, each file written whole or not at all. Returns the files written. Throws
/// MergeError.
std::vector<std::string> merge_weights(const std::string& checkpoint_dir,
                                       const std::string& output_dir);

}  // namespace launcher
}  // namespace accel
