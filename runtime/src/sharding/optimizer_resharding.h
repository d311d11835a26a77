#pragma once

// Optimizer state saved on one layout and loaded on another: a sharded optimizer's state on
// another process count or strategy, into NO_SHARD and out of it (what PyTorch's distributed
// checkpoint does on load, for accel's checkpoints).
//
// A layout says, for each parameter group, what the optimizer's parameters are cut from: units,
// each holding some of the group's parameters (as prepared) end to end at known offsets, padded
// and split into `slices` equal slices, slice r on process r (see optimizer_shards.h). NO_SHARD's
// layout has one unit per parameter and one slice. save_state writes the layout into
// accel_state.json. When the saved layout is not the run's, load_state reads the file of each
// saved slice that holds elements of this process's own slices, one at a time, and copies those
// elements of every per-element state tensor (optimizer_state_tensors.h) into place: no process
// holds more than its own state and one saved slice's file at once.

#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include "optimizer_shards.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace detail {

struct OptimizerLayout {
  /// A group parameter in a unit: its place in the group, where it starts in the unit, its size.
  struct Member {
    int64_t index = 0, offset = 0, numel = 0;
    bool operator==(const Member& other) const {
      return index == other.index && offset == other.offset && numel == other.numel;
    }
  };
  struct Unit {
    std::vector<Member> members;
    int64_t total = 0;           // elements of its members
    int64_t slice_elements = 0;  // elements of each slice (padding included)
    bool operator==(const Unit& other) const {
      return members == other.members && total == other.total &&
             slice_elements == other.slice_elements;
    }
  };
  /// The units of each parameter group, in the order of the optimizer's parameters.
  std::vector<std::vector<Unit>> groups;
  int64_t slices = 1;

  bool operator==(const OptimizerLayout& other) const {
    return groups == other.groups && slices == other.slices;
  }
  nlohmann::json to_json() const;
  /// The layout `json` describes; an error naming `where` when it does not describe one.
  static OptimizerLayout from_json(const nlohmann::json& json, const std::string& where);
};

/// The layout of `optimizer` as it is: sharded by one of `shards` (whose shards are its
/// parameters; `rank` is then set to this process's slice), or one unit per parameter.
OptimizerLayout layout_of(const torch::optim::Optimizer& optimizer,
                          const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                          int64_t* rank = nullptr);

/// The saved slices whose elements this process (slice `rank` of `live`) needs, ascending.
/// Checks that both layouts hold the same parameters with the same sizes; errors name `where`.
std::vector<int64_t> slices_to_read(const OptimizerLayout& saved, const OptimizerLayout& live,
                                    int64_t rank, const std::string& where);

/// Makes `optimizer`'s state (laid out as `live`, this process holding slice `rank`) the state
/// saved under `saved`. `read_slice(r)` loads saved slice r's file into the optimizer; while it
/// runs, the parameter groups hold stand-ins for slice r's parameters. The learning rates and
/// other group options are the saved ones.
void load_resplit(torch::optim::Optimizer& optimizer, const OptimizerLayout& live, int64_t rank,
                  const OptimizerLayout& saved, const std::function<void(int64_t)>& read_slice,
                  const std::string& where);

/// An optimizer whose saved layout is not this run's: both layouts, this process's slice of the
/// live one, and the saved slices it reads, ascending.
struct ResplitPlan {
  OptimizerLayout live, saved;
  int64_t rank = 0;
  std::vector<int64_t> slices;
};

/// How to load `optimizer` (its parameter groups in place) from state saved under
/// `saved_layout` (the optimizer's entry of accel_state.json's optimizer_layout; errors name
/// `state_path`): none when laid out as saved on as many processes (each process reads its own
/// file). With another process count even an equal layout is re-split, which reads each slice
/// from its first holder's file (under HYBRID_SHARD the other machines' processes hold the same
/// slices under other numbers). `where` names the optimizer's saved state in errors.
std::optional<ResplitPlan> plan_resplit(const torch::optim::Optimizer& optimizer,
                                        const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                                        const nlohmann::json& saved_layout, bool same_processes,
                                        const std::string& state_path, const std::string& where);

}  // namespace detail
}  // namespace accel
