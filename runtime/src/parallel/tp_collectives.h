#pragma once

// The collectives of tensor parallelism as autograd functions (Megatron's f and g and their
// gathering forms), so that backward through a split layer is exact: each is the transpose of
// its forward. All run over one tensor-parallel group and are collective in forward and in
// backward: every process of the group calls them in the same order.

#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace accel {
namespace detail {

using GroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

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

}  // namespace detail
}  // namespace accel
