#pragma once

// The collectives of tensor parallelism as autograd functions (Megatron's f and g and their
// gathering forms), so that backward through a split layer is exact: each is the transpose of
// its forward. All run over one tensor-parallel group and are collective in forward and in
// backward: every process of the group calls them in the same order.

#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace accel {
namespace parallel {

using GroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

/// This process's part of `whole`'s dimension `dim` cut into as many equal parts as `group` has
/// processes (a view; no collective, no autograd function): the one rule for which slice a
/// process holds, when a parameter is split, loaded, or an activation sliced.
torch::Tensor group_part(const torch::Tensor& whole, const c10d::ProcessGroup& group, int64_t dim);

/// Identity forward; the gradient is summed over the group (the input of a colwise layer, used
/// by every process).
torch::Tensor copy_to_group(const torch::Tensor& input, const GroupPtr& group);
/// Sum over the group forward; identity backward (the partial products of a rowwise layer).
torch::Tensor reduce_from_group(const torch::Tensor& input, const GroupPtr& group);
/// Concatenates every process's `input` along its last dimension; backward keeps this
/// process's slice of the gradient.
torch::Tensor gather_last_dim(const torch::Tensor& input, const GroupPtr& group);
/// This process's slice of `input`'s last dimension; backward gathers the gradient whole.
torch::Tensor split_last_dim(const torch::Tensor& input, const GroupPtr& group);

/// This process's slice of `dim`; backward gathers the gradient whole (a replicated embedding's
/// lookups entering a sequence-parallel region).
torch::Tensor split_dim(const torch::Tensor& input, const GroupPtr& group, int64_t dim);
/// The sum over the group, of which this process keeps its slice of `dim`; backward gathers
/// (a rowwise layer's output entering a sequence-parallel region).
torch::Tensor reduce_scatter_dim(const torch::Tensor& input, const GroupPtr& group, int64_t dim);
/// Every process's `input` concatenated along `dim`; backward sums the gradient over the group
/// and keeps this process's slice (a colwise layer's input leaving a sequence-parallel region).
torch::Tensor gather_dim_for_group(const torch::Tensor& input, const GroupPtr& group, int64_t dim);

}  // namespace parallel
}  // namespace accel
