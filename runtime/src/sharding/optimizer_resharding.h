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
//
// Under tensor parallelism a parameter is itself a slice of a whole one (its part of the tp
// group's), and each of the tp processes of a slice holds the state of its own part: a layout
// records the parts and how each parameter is cut, and a parameter cut otherwise than saved (tp 2
// from tp 4, or from one process) takes its elements through their places in the whole tensor.
//
// Under pipeline parallelism each stage's processes hold some of the parameters: a member's index
// is then its place in the whole model's group (the optimizer one process would have), each unit
// records the pp stage whose processes hold it, and the layout saved is every stage's units, in
// stage order. A stage's slice s of part t is held by process stage * per_stage + s * tp + t.

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
namespace sharding {

struct OptimizerLayout {
  /// A group parameter in a unit: its place in the group, where it starts in the unit, its size.
  struct Member {
    int64_t index = 0, offset = 0, numel = 0;
    /// A tensor-parallel slice's: the dimension its whole parameter is cut along into `tp`
    /// parts; -1 for a parameter held whole.
    int64_t cut_dim = -1;
    /// Its shape (of the slice, when cut); empty in a layout saved before shapes were recorded,
    /// which then matches any.
    std::vector<int64_t> shape;
    bool operator==(const Member& other) const {
      return index == other.index && offset == other.offset && numel == other.numel &&
             cut_dim == other.cut_dim &&
             (shape.empty() || other.shape.empty() || shape == other.shape);
    }
  };
  struct Unit {
    std::vector<Member> members;
    int64_t total = 0;           // elements of its members
    int64_t slice_elements = 0;  // elements of each slice (padding included)
    int64_t stage = 0;           // the pp stage whose processes hold it
    bool operator==(const Unit& other) const {
      return members == other.members && total == other.total &&
             slice_elements == other.slice_elements && stage == other.stage;
    }
  };
  /// The units of each parameter group, in the order of the optimizer's parameters.
  std::vector<std::vector<Unit>> groups;
  int64_t slices = 1;
  /// The tensor-parallel parts (1: none). Slice s of part t is held by process s * tp + t (and
  /// by others like it on other replicas): the mesh's order, tp innermost.
  int64_t tp = 1;
  /// The pipeline's stages (1: none), and the processes of each.
  int64_t pp = 1, per_stage = 1;

  bool operator==(const OptimizerLayout& other) const {
    return groups == other.groups && slices == other.slices && tp == other.tp && pp == other.pp &&
           per_stage == other.per_stage;
  }
  /// The saved process whose file holds slice `slice` of part `part` of a unit of `stage`.
  int64_t file_of(int64_t stage, int64_t slice, int64_t part) const {
    return stage * per_stage + slice * tp + part;
  }
  nlohmann::json to_json() const;
  /// The layout `json` describes; an error naming `where` when it does not describe one.
  static OptimizerLayout from_json(const nlohmann::json& json, const std::string& where);
};

/// Where a process stands among the tensor-parallel parts: `size` parts, it holds part `rank`.
struct TpPart {
  int64_t size = 1, rank = 0;
};

/// A pipeline stage's parameter's place in the whole model's group: (group, its place in this
/// process's group) -> its place in the group one process holding every stage would have.
using GlobalIndex = std::function<int64_t(size_t group, int64_t index)>;

/// The layout of `optimizer` as it is: sharded by one of `shards` (whose shards are its
/// parameters; `rank` is then set to this process's slice), or one unit per parameter; its
/// parameters cut into `tp.size` parts where they are tensor-parallel slices. With
/// `global_index` (a pipeline stage's), members are numbered in the whole model's groups.
OptimizerLayout layout_of(const torch::optim::Optimizer& optimizer,
                          const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                          int64_t tp_size = 1, int64_t* rank = nullptr,
                          const GlobalIndex& global_index = nullptr);

/// Each group's parameters as the optimizer was built with them, by their place in the group:
/// the group's own, or, sharded, those its shards were cut from.
std::vector<std::vector<at::Tensor>> built_parameters(
    const torch::optim::Optimizer& optimizer,
    const std::vector<std::shared_ptr<OptimizerShards>>& shards);

/// The saved processes (slice * tp + part) whose files hold elements this process (slice
/// `rank` of `live`, part `part`) needs, ascending. Checks that both layouts hold the same
/// parameters with the same whole sizes; errors name `where`.
std::vector<int64_t> files_to_read(const OptimizerLayout& saved, const OptimizerLayout& live,
                                   int64_t rank, int64_t part, const std::string& where);

/// Makes `optimizer`'s state (laid out as `live`, this process holding slice `rank` of part
/// `part`) the state saved under `saved`. `read_file(p)` loads saved process p's file into the
/// optimizer; while it runs, the parameter groups hold stand-ins for that file's parameters.
/// The learning rates and other group options are the saved ones.
void load_resplit(torch::optim::Optimizer& optimizer, const OptimizerLayout& live, int64_t rank,
                  int64_t part, const OptimizerLayout& saved,
                  const std::function<void(int64_t)>& read_file, const std::string& where);

/// An optimizer whose saved layout is not this run's: both layouts, this process's slice and
/// part of the live one, and the saved processes whose files it reads, ascending.
struct ResplitPlan {
  OptimizerLayout live, saved;
  int64_t rank = 0, part = 0;
  std::vector<int64_t> files;
};

/// How to load `optimizer` (its parameter groups in place) from state saved under
/// `saved_layout` (the optimizer's entry of accel_state.json's optimizer_layout; errors name
/// `state_path`): none when laid out as saved on as many processes (each process reads its own
/// file). With another process count even an equal layout is re-split, which reads each slice
/// from its first holder's file (under HYBRID_SHARD the other machines' processes hold the same
/// slices under other numbers). `where` names the optimizer's saved state in errors.
/// A pipeline stage's (`global_index` set, `pp` stages) is always re-split: its live layout holds
/// its own stages' units, the saved one every stage's.
std::optional<ResplitPlan> plan_resplit(const torch::optim::Optimizer& optimizer,
                                        const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                                        TpPart tp, const nlohmann::json& saved_layout,
                                        bool same_processes, const std::string& state_path,
                                        const std::string& where,
                                        const GlobalIndex& global_index = nullptr, int64_t pp = 1);

}  // namespace sharding
}  // namespace accel
