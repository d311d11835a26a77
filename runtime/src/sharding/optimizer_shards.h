#pragma once

// Sharding strategies for one prepared optimizer: ZeRO-1 (SHARD_OPTIMIZER_STATE), ZeRO-2
// (SHARD_GRAD_OP), ZeRO-3 (FULL_SHARD) and HYBRID_SHARD, each with CPU offload. The Accelerator
// makes one per sharded optimizer (Accelerator::shard_optimizer), which the optimizer holds as its
// detail::ShardedStep.
//
// The parameters of each parameter group are laid end to end in one flat buffer, padded to a
// multiple of the process count, and become views of it (FSDP's flat parameter); process r owns
// the r-th equal slice. The optimizer is handed that slice in place of the group's parameters: one
// flat tensor per group, the "shard", whose gradient is this process's slice of the averaged
// gradients and whose optimizer state (Adam's moments, SGD's momentum) exists only here, 1/N of
// it. A step updates the shard, and so this process's part of the parameters, in place; an
// all-gather then fills in the rest. Under ZeRO-1 and -2 every process keeps the parameters whole
// (they shard gradients and optimizer state, not parameters).
//
// Elementwise optimizers (SGD, Adam, AdamW, Adagrad, RMSprop) give the same update on a flat slice
// as on the parameters; LBFGS, which takes whole-model dot products, is refused.
//
// With `shard_parameters` (FULL_SHARD, ZeRO-3) no process keeps the parameters whole either: the
// shard owns this process's slice, and the model's parameters become sharded parameters
// (sharded_parameter.h) whose values are gathered unit by unit by the operators that use them,
// and freed after (unit_gather.h; unit_gather.cpp). Units are then the caller's (FSDP's wrapped
// modules), not runs of consecutive parameters.
//
// With `offload_to_host` (CPU offload) the shards, their gradients and so the optimizer's state
// are host tensors (pinned when the parameters are on a GPU), and the optimizer steps on the
// host: a reduced slice is copied there from the device, and an updated shard back to the device
// for the all-gather. ZeRO-1 and -2 then keep a device copy of the parameters (the flat buffer)
// beside the host shard, which is the value that counts: refresh_from_parameters() copies the
// device's values into it after the parameters were written. With FULL_SHARD the device holds
// nothing but the units gathered at the moment.
//
// With a `replicate_group` (HYBRID_SHARD) the slices are cut among `group` (one machine's
// processes) and each group of the job holds the same slices: a reduce-scattered slice is summed
// with its replicas over `replicate_group` before it is averaged over every process.
//
// Gradients reach the shards through its GradientPipeline (gradient_pipeline.h: ZeRO-2's
// reduce-scatter during backward, or a slice of ZeRO-1's all-reduced gradients).

#include <accel/detail/sharded_step.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/arg.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

namespace c10 {
struct TensorImpl;
}
namespace torch {
namespace autograd {
struct Node;
}
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace accel {
namespace sharding {

/// How the full gradients become this process's averaged slice.
enum class GradientReduction {
  /// Backward all-reduced them already (ZeRO-1): the slice is cut out after it.
  slice_all_reduced,
  /// Each process keeps its own through backward (ZeRO-2): a unit's gradients are
  /// reduce-scattered as soon as backward has finished them all, then freed, so the full
  /// gradients of only a few units are alive at a time.
  reduce_scatter,
};

/// Which collectives move the slices.
enum class ShardCollectives {
  /// c10d's reduce-scatter and all-gather (`_reduce_scatter_base`, `_allgather_base`).
  native,
  /// All-reduces of the whole buffer with the same results: the reduce-scatter's slice is cut
  /// from the sum, and the all-gather sums buffers zeroed but for each process's own slice
  /// (x + 0 is x exactly). Gloo's reduce-scatter and all-gather take longer than its
  /// all-reduce (400 MB on 2 processes here: 0.54 s and 0.44 s against 0.28 s).
  all_reduce,
};

/// Which unit a parameter belongs to (FULL_SHARD's wrap policy): parameters of one group with
/// the same number make one unit.
using ShardUnitOf = std::function<int64_t(const at::Tensor&)>;

/// How OptimizerShards cuts an optimizer and moves its slices; Accelerator::shard_optimizer
/// builds it from the resolved options.
struct ShardingPlan {
  explicit ShardingPlan(c10::intrusive_ptr<c10d::ProcessGroup> group) : group_(std::move(group)) {}
  /// The processes that split each unit into slices.
  TORCH_ARG(c10::intrusive_ptr<c10d::ProcessGroup>, group);
  TORCH_ARG(GradientReduction, reduction) = GradientReduction::reduce_scatter;
  /// Units are runs of consecutive parameters of about this many bytes (one parameter at
  /// least), unless `unit_of` says otherwise.
  TORCH_ARG(int64_t, unit_bytes) = int64_t{25} << 20;
  TORCH_ARG(ShardCollectives, collectives) = ShardCollectives::native;
  /// FULL_SHARD: the parameters are sharded too (they must be the same on every process, as
  /// prepare(model) makes them).
  TORCH_ARG(bool, shard_parameters) = false;
  TORCH_ARG(ShardUnitOf, unit_of) = nullptr;
  /// HYBRID_SHARD: `group` is one of several holding the same shards; this one links them.
  TORCH_ARG(c10::intrusive_ptr<c10d::ProcessGroup>, replicate_group) = {};
  /// CPU offload: the shards are host tensors.
  TORCH_ARG(bool, offload_to_host) = false;
  /// FULL_SHARD of a model built by init_empty_weights: meta parameters become sharded
  /// parameters on this device whose shards hold zeros until a load fills them
  /// (load_checkpoint_in_model writes each process's part only).
  TORCH_ARG(std::optional<c10::Device>, device_of_empty_weights) = std::nullopt;
};

class OptimizerShards : public detail::ShardedStep {
 public:
  /// Replaces the parameters of each of `optimizer`'s groups by this process's shards of them,
  /// cut as `plan` says.
  OptimizerShards(torch::optim::Optimizer& optimizer, const ShardingPlan& plan);
  ~OptimizerShards();
  OptimizerShards(const OptimizerShards&) = delete;
  OptimizerShards& operator=(const OptimizerShards&) = delete;

  /// Before a backward that synchronises gradients (ZeRO-2): units are sent as they finish.
  void arm();
  /// After that backward: sends the units not sent yet and adds every unit's averaged slice to
  /// its shard's gradient. With `completed` false (backward threw) the gradients are dropped.
  void finish_backward(bool completed);
  /// For gradients still whole (ZeRO-1; or a backward not through accelerator.backward): adds
  /// them, averaged over the processes, to the shards' and frees them. Nothing to do (and no
  /// collective) when no full parameter has a gradient; every process runs the same program, so
  /// all agree. Also rebinds parameters whose data was replaced (see refresh_from_parameters).
  void reduce_gradients() override;
  /// Multiplies the shards' gradients by `factor` (backward(loss_sum, num_items)'s division).
  void scale_gradients(double factor);
  /// `unused`: parameters no process used in this accumulation window (find_unused_parameters),
  /// which are not stepped, as on one process where their gradient is undefined. A unit none of
  /// whose parameters was used keeps no shard gradient, so the optimizer passes it by; in a unit
  /// that holds used ones too, the unused ones' elements of the shard and of its per-element
  /// optimizer state (Adam's moments, SGD's momentum) are put back after the step. The step
  /// counter (Adam's bias correction) is the unit's. Called after each synchronising backward.
  void leave_unstepped(const std::vector<at::Tensor>& unused);
  /// Around the optimizer's step: keeps what leave_unstepped named, then puts it back.
  void before_step(torch::optim::Optimizer& optimizer) override;
  void after_step(torch::optim::Optimizer& optimizer) override;
  /// After a step: the updated shards, all-gathered into the full parameters (with sharded
  /// parameters: the units left whole are dropped, the next use gathers them anew).
  void gather_parameters() override;
  /// Reduce-scatters (ZeRO-2 and -3) move the gradients in `dtype` (FSDP's MixedPrecision
  /// reduce_dtype): the full gradients are cast to it in the send buffer and summed in it, and
  /// each process's slice is cast back to the shard's dtype before it is averaged.
  void set_reduce_dtype(c10::ScalarType dtype);
  /// FULL_SHARD: while a unit is used, start gathering the one used after it the step before
  /// (asynchronously), in forward and/or in backward (after arm()). Every process prefetches at
  /// the same points, so collectives stay in one order.
  void set_prefetch(bool forward, bool backward);
  /// Bytes this process has sent in reduce-scatters so far (each unit's send buffer).
  int64_t reduce_scattered_bytes() const;
  /// FULL_SHARD: the parameters are sharded parameters.
  bool shards_parameters() const { return shard_parameters_; }
  /// CPU offload: the shards are host tensors.
  bool offloads_to_host() const { return offload_; }
  struct GatherStatistics {
    int64_t gathers = 0;      // units gathered so far
    int64_t alive_bytes = 0;  // bytes of gathered units still alive (whole, or referred to)
    /// The most bytes of gathered units alive at once since reset_gather_peak(), counted as
    /// each gather allocates: the unit being gathered and its staging copy of the shard
    /// included.
    int64_t peak_bytes = 0;
    int64_t largest_unit_bytes = 0;   // the largest unit, whole (padding included)
    int64_t largest_shard_bytes = 0;  // the largest shard, in the parameters' dtype
    /// Bytes the gathers received (each gathered unit's whole value), so far: halved under
    /// bf16 and fp16 autocast, where the units are gathered in the autocast dtype.
    int64_t gathered_bytes = 0;
    int64_t prefetches = 0;          // gathers started ahead of their use
    double gather_wait_seconds = 0;  // time operators waited for gathers: exposed communication
  };
  /// FULL_SHARD: what the gathers have done (zeros otherwise).
  GatherStatistics gather_statistics() const;
  /// Starts counting GatherStatistics::peak_bytes afresh.
  void reset_gather_peak();
  /// FULL_SHARD: how many units may be whole at once; 2 (FSDP's limit_all_gathers: the unit
  /// running and the next), and a gather frees the oldest before it allocates. Tests set 3 to
  /// show their bound catches a unit kept too long.
  void set_units_whole(size_t units);

  /// One unit as a checkpoint describes it.
  struct UnitLayout {
    std::vector<at::Tensor> params;  // in the unit's order
    std::vector<int64_t> offsets;    // where each starts in the unit's flat range
    at::Tensor shard;                // this process's slice (the optimizer's parameter)
    int64_t group = 0;               // the optimizer parameter group it belongs to
    std::vector<int64_t> indices;    // each parameter's place in that group, as prepared
    int64_t total = 0;               // elements of its parameters, without the padding
    int64_t rank = 0, slices = 1;    // the slice this process holds, of how many
  };
  std::vector<UnitLayout> unit_layouts() const;
  /// The parameters will be checked for replaced data before the next use (after the model's
  /// weights were loaded).
  void refresh_from_parameters();
  /// Frees (or zeroes) the full parameters' gradients; the shards' are the optimizer's to clear.
  void zero_full_gradients(bool set_to_none) override;
  /// True when any of the parameters it shards is among `leaves`.
  bool holds_any(const std::unordered_set<const c10::TensorImpl*>& leaves) const;

  /// This process's parts of the gradients of those of `parameters` it shards (a view of the
  /// shard gradient per piece), for clipping; `rest` gets the parameters it does not hold.
  void shard_gradients_of(const std::vector<at::Tensor>& parameters,
                          std::vector<at::Tensor>& pieces, std::vector<at::Tensor>& rest);

 private:
  struct Unit;
  class GradientPipeline;  // gradient_pipeline.h
  class Gathered;
  class GatherWindow;
  class UnitParameter;
  /// One unit of a parameter group: `members` are places in the group's `params`. Its shard is
  /// cut from them (and, sharding parameters, they become views served from the unit).
  Unit make_unit(int64_t group_index, const std::vector<at::Tensor>& params,
                 const std::vector<size_t>& members);
  /// FULL_SHARD: the unit keeps its shard alone, and each of its parameters becomes a sharded
  /// parameter gathered from it (`empty`: the parameters were meta; the shard holds zeros).
  void shard_unit_parameters(Unit& unit, bool empty);
  /// FP8 training's float8 all-gather: where the unit's elements travel when it is gathered in
  /// FP8 (no layout when none of its weights is).
  struct Fp8Plan;
  Fp8Plan plan_fp8_gather(const Unit& unit) const;
  void ensure_bound();

  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  GradientReduction reduction_;
  bool through_all_reduce_;  // ShardCollectives::all_reduce
  bool shard_parameters_;
  bool offload_;                          // the shards are host tensors
  std::shared_ptr<GatherWindow> window_;  // FULL_SHARD: the units whole at the moment
  std::vector<Unit> units_;
  /// A unit some of whose parameters leave_unstepped named: their places in the shard, and
  /// their values (shard and per-element optimizer state) from before the step.
  struct Unstepped {
    size_t unit = 0;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // {start in the shard, length}
    std::vector<at::Tensor> values;                   // the shard's, range by range
    std::vector<std::vector<at::Tensor>> state;       // each state tensor's, range by range
    bool had_state = false;                           // the optimizer had state for the shard
  };
  std::vector<Unstepped> unstepped_;
  std::optional<c10::Device> device_of_empty_;  // where meta parameters' shards go
  /// The gradients' way onto the shards (made once units_ is complete; it refers to it).
  std::unique_ptr<GradientPipeline> gradients_;
  bool bound_ = true;
};

}  // namespace sharding

namespace detail {

/// The runtime's own way to a prepared optimizer's sharding: the one ShardedStepKey's public
/// header names as its friend, so in that header's namespace.
struct ShardedStepAccess {
  template <typename PreparedOptimizer>
  static std::shared_ptr<sharding::OptimizerShards> shards_of(const PreparedOptimizer& optimizer) {
    return std::dynamic_pointer_cast<sharding::OptimizerShards>(
        optimizer.sharded_step(ShardedStepKey()));
  }
};

}  // namespace detail

namespace sharding {

/// The shards of `optimizer` (an AcceleratedOptimizer), or null when it is not sharded.
template <typename PreparedOptimizer>
std::shared_ptr<OptimizerShards> shards_of(const PreparedOptimizer& optimizer) {
  return detail::ShardedStepAccess::shards_of(optimizer);
}

}  // namespace sharding
}  // namespace accel
