// Tensor parallelism's collectives as autograd functions: see tp_collectives.h.

#include "tp_collectives.h"

#include "distributed/collectives.h"
#include "traffic.h"

#include <torch/autograd.h>

#include <cstdint>

namespace accel {
namespace parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor summed(const torch::Tensor& tensor, const GroupPtr& group) {
  auto out = tensor.contiguous().clone();
  parallel_traffic().tp_bytes += static_cast<int64_t>(out.nbytes());
  distributed::all_reduce(*group, out, Reduction::Sum);
  return out;
}

torch::Tensor gathered(const torch::Tensor& tensor, const GroupPtr& group, int64_t dim) {
  parallel_traffic().tp_bytes += static_cast<int64_t>(tensor.nbytes());
  return torch::cat(distributed::all_gather(*group, tensor.contiguous()), dim);
}

torch::Tensor own_slice(const torch::Tensor& tensor, const GroupPtr& group, int64_t dim) {
  return group_part(tensor, *group, dim).contiguous();
}

// The mesh's groups are made once and kept for the life of the process (DistributedState), so a
// graph may refer to its group by address.
void save_group(AutogradContext* ctx, const GroupPtr& group) {
  ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group.get()));
}

GroupPtr tp_group_of(AutogradContext* ctx) {
  auto* group = reinterpret_cast<c10d::ProcessGroup*>(
      static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
  return GroupPtr::reclaim_copy(group);
}

/// What one side (forward or backward) of a collective does to its tensor. Each collective
/// below pairs a step with its transpose, so backward is exact.
enum class Step : int64_t {
  identity,        // the tensor itself
  sum,             // summed over the group
  gather,          // every process's, concatenated along `dim`
  slice,           // this process's slice of `dim`
  reduce_scatter,  // summed over the group, this process's slice of `dim` kept
};

torch::Tensor run_step(Step step, const torch::Tensor& tensor, const GroupPtr& group, int64_t dim) {
  switch (step) {
    case Step::identity:
      return tensor.view_as(tensor);
    case Step::sum:
      return summed(tensor, group);
    case Step::gather:
      return gathered(tensor, group, dim);
    case Step::slice:
      return own_slice(tensor, group, dim);
    case Step::reduce_scatter:
      // Megatron's reduce-scatter, here an all-reduce and a slice.
      return own_slice(summed(tensor, group), group, dim);
  }
  return tensor;
}

/// A collective over the group as an autograd function: `forward` on the way in, `backward`
/// (its transpose) on the gradient.
struct GroupCollective : torch::autograd::Function<GroupCollective> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, GroupPtr group,
                               int64_t dim, int64_t forward_step, int64_t backward_step) {
    save_group(ctx, group);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["backward"] = backward_step;
    return run_step(static_cast<Step>(forward_step), input, group, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto step = static_cast<Step>(ctx->saved_data["backward"].toInt());
    return {
        run_step(step, grads[0], tp_group_of(ctx), ctx->saved_data["dim"].toInt()), {}, {}, {}, {}};
  }
};

torch::Tensor collective(const torch::Tensor& input, const GroupPtr& group, int64_t dim,
                         Step forward, Step backward) {
  return GroupCollective::apply(input, group, dim, static_cast<int64_t>(forward),
                                static_cast<int64_t>(backward));
}

}  // namespace

torch::Tensor group_part(const torch::Tensor& whole, const c10d::ProcessGroup& group, int64_t dim) {
  const int64_t size = group.getSize();
  const int64_t width = whole.size(dim);
  TORCH_CHECK(width % size == 0, "accel: tensor parallelism splits a dimension of ", width,
              " (dimension ", dim, ") over ", size, " processes, which does not divide it");
  return whole.narrow(dim, group.getRank() * (width / size), width / size);
}

ParallelTraffic& parallel_traffic() {
  static ParallelTraffic traffic;
  return traffic;
}

torch::Tensor copy_to_group(const torch::Tensor& input, const GroupPtr& group) {
  return collective(input, group, 0, Step::identity, Step::sum);
}
torch::Tensor reduce_from_group(const torch::Tensor& input, const GroupPtr& group) {
  return collective(input, group, 0, Step::sum, Step::identity);
}
torch::Tensor gather_last_dim(const torch::Tensor& input, const GroupPtr& group) {
  return collective(input, group, input.dim() - 1, Step::gather, Step::slice);
}
torch::Tensor split_last_dim(const torch::Tensor& input, const GroupPtr& group) {
  return collective(input, group, input.dim() - 1, Step::slice, Step::gather);
}
torch::Tensor split_dim(const torch::Tensor& input, const GroupPtr& group, int64_t dim) {
  return collective(input, group, dim, Step::slice, Step::gather);
}
torch::Tensor reduce_scatter_dim(const torch::Tensor& input, const GroupPtr& group, int64_t dim) {
  return collective(input, group, dim, Step::reduce_scatter, Step::gather);
}
torch::Tensor gather_dim_for_group(const torch::Tensor& input, const GroupPtr& group, int64_t dim) {
  return collective(input, group, dim, Step::gather, Step::reduce_scatter);
}

}  // namespace parallel
}  // namespace accel
