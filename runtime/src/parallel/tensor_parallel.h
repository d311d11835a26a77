#pragma once

// Tensor parallelism from a plan (accel/tensor_parallel.h), in place.
//
// LibTorch modules have no forward hooks, so the collectives of a split layer cannot be put
// "around its forward". The planned parameters carry them instead: each is replaced, in place
// (the module's registered entry and its member alike), by this process's slice, whose dispatch
// key set includes kTensorParallelDispatchKey. That key sits above autocast and autograd, so the
// operators a Linear or an Embedding forward runs (linear, addmm and matmul on the weight or
// its t(), embedding) reach tp_kernels.cpp whole, with the activations, where the slice's
// style adds its collectives (tp_collectives.h) and runs the operator below the key. Every other
// operator passes the key by (the optimizer's, a view's, a copy's), and backward's operators see
// plain mm/bmm on the slices, so autograd differentiates through the collectives as written.

#include <accel/tensor_parallel.h>

#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace accel {
namespace parallel {

enum class TpStyle {
  colwise,
  colwise_gather_output,
  rowwise,
  rowwise_split_input,
  embedding_rowwise,
  replicate,
  sequence_parallel,
};

/// The style `name` spells (either spelling of the replicated-side styles); none otherwise.
std::optional<TpStyle> parse_tp_style(const std::string& name);
const char* to_string(TpStyle style);

/// What a planned parameter holds.
struct TpSlice {
  TpStyle style = TpStyle::replicate;
  /// The dimension the parameter is split along; -1 for one held whole that still needs the
  /// kernels (a sequence_parallel Embedding's table, whose lookups are split on the sequence).
  int64_t dim = 0;
  /// The plan has sequence-parallel regions: activations between the split layers are sharded
  /// on the sequence (dimension 1), so colwise inputs are all-gathered and rowwise outputs
  /// reduce-scattered on it.
  bool sequence_parallel = false;
  /// Its size along `dim` before the split.
  int64_t whole_size = 0;
  /// The module's name and the parameter's, for messages.
  std::string name;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
};

/// Splits the modules `plan` names across `group`, in place. Everything is checked before
/// anything changes, alike on every process (the plan and the model are the same everywhere):
/// an error names the pattern, the module, the style and the sizes.
void apply_tensor_parallel_plan(torch::nn::Module& model, const TensorParallelPlan& plan,
                                const c10::intrusive_ptr<c10d::ProcessGroup>& group);

/// The entries of `plan` whose pattern matches some module of `part` (a pipeline stage, which
/// holds some of the modules a plan for the whole model names).
TensorParallelPlan plan_for_part(const torch::nn::Module& part, const TensorParallelPlan& plan);

/// The same checks without splitting anything, as for a group of `tp` processes (a plan on a
/// layout without tensor parallelism is checked with tp 1, then ignored).
void check_tensor_parallel_plan(const torch::nn::Module& model, const TensorParallelPlan& plan,
                                int64_t tp);

/// The slice a tensor holds, shared, for a tensor that stands for it elsewhere (a sharded
/// parameter's storage-less value, a lazy view of one); null for any other tensor.
std::shared_ptr<const TpSlice> tp_slice_handle(const at::Tensor& tensor);
/// Registers `tensor` (which carries kTensorParallelDispatchKey) as holding `slice`.
void register_tp_slice(const at::Tensor& tensor, std::shared_ptr<const TpSlice> slice);

/// The slice a tensor (a planned parameter or a view of one) holds; null for any other.
const TpSlice* tp_slice_of(const at::Tensor& tensor);

/// `parameter.set_data(value)` that keeps a slice a slice: a sharded strategy binding the
/// parameters into its flat buffers (ZeRO-1 and -2) calls it.
void set_data_keeping_slice(const at::Tensor& parameter, const at::Tensor& value);

/// True for a parameter split across its group (a slice, not a whole tensor).
inline bool is_tensor_parallel_slice(const at::Tensor& tensor) {
  const TpSlice* slice = tp_slice_of(tensor);
  return slice != nullptr && slice->dim >= 0;
}

/// The whole value of a split parameter, gathered from its group (collective: every process of
/// the group calls it in the same order); `tensor` itself for any other.
at::Tensor whole_tensor(const at::Tensor& tensor);
/// The whole value of `slice` from this process's `value` of it (collective over its group).
at::Tensor whole_tensor(const at::Tensor& value, const TpSlice& slice);

/// Forgets the input the last colwise layers shared (tp_kernels.cpp): backward calls it, so that
/// the forward's last shared activation, and the graph behind it, do not outlive the step.
void release_shared_input();

/// The shape of the whole tensor a tensor is this process's slice of (its own for any other).
std::vector<int64_t> whole_sizes(const at::Tensor& tensor);
/// This process's part of `whole` when `tensor` is a slice of it (a view); `whole` otherwise.
at::Tensor this_part_of(const at::Tensor& whole, const at::Tensor& tensor);

}  // namespace parallel
}  // namespace accel
