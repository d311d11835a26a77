// Tensor parallelism's collectives as autograd functions: see tp_collectives.h.

#include "tp_collectives.h"

#include "distributed/collectives.h"
#include "traffic.h"

#include <torch/autograd.h>

#include <cstdint>

namespace accel {
namespace detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor summed(const torch::Tensor& tensor, const GroupPtr& group) {
  auto out = tensor.contiguous().clone();
  parallel_traffic().tp_bytes += static_cast<int64_t>(out.nbytes());
  all_reduce(*group, out, Reduction::Sum);
  return out;
}

torch::Tensor gathered(const torch::Tensor& tensor, const GroupPtr& group, int64_t dim) {
  parallel_traffic().tp_bytes += static_cast<int64_t>(tensor.nbytes());
  return torch::cat(all_gather(*group, tensor.contiguous()), dim);
}

torch::Tensor own_slice(const torch::Tensor& tensor, const GroupPtr& group, int64_t dim) {
  const int64_t size = group->getSize();
  const int64_t width = tensor.size(dim);
  TORCH_CHECK(width % size == 0, "accel: tensor parallelism splits a dimension of ", width,
              " (dimension ", dim, ") over ", size, " processes, which does not divide it");
  return tensor.narrow(dim, group->getRank() * (width / size), width / size).contiguous();
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

struct CopyToGroup : torch::autograd::Function<CopyToGroup> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, GroupPtr group) {
    save_group(ctx, group);
    return input.view_as(input);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(grads[0], tp_group_of(ctx)), torch::Tensor()};
  }
};

struct ReduceFromGroup : torch::autograd::Function<ReduceFromGroup> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& input, GroupPtr group) {
    return summed(input, group);
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

struct GatherDim : torch::autograd::Function<GatherDim> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, GroupPtr group,
                               int64_t dim) {
    save_group(ctx, group);
    ctx->saved_data["dim"] = dim;
    return gathered(input, group, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {own_slice(grads[0], tp_group_of(ctx), ctx->saved_data["dim"].toInt()), {}, {}};
  }
};

struct SplitDim : torch::autograd::Function<SplitDim> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, GroupPtr group,
                               int64_t dim) {
    save_group(ctx, group);
    ctx->saved_data["dim"] = dim;
    return own_slice(input, group, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {gathered(grads[0], tp_group_of(ctx), ctx->saved_data["dim"].toInt()), {}, {}};
  }
};

/// Megatron's sequence-parallel pair: the sum over the group, of which this process keeps its
/// slice of `dim` (a reduce-scatter, here an all-reduce and a slice); backward gathers.
struct ReduceScatterDim : torch::autograd::Function<ReduceScatterDim> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, GroupPtr group,
                               int64_t dim) {
    save_group(ctx, group);
    ctx->saved_data["dim"] = dim;
    return own_slice(summed(input, group), group, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {gathered(grads[0], tp_group_of(ctx), ctx->saved_data["dim"].toInt()), {}, {}};
  }
};

/// All-gather along `dim` forward; backward sums the gradient over the group and keeps this
/// process's slice (the input of a colwise layer in a sequence-parallel region).
struct GatherDimReduceScatter : torch::autograd::Function<GatherDimReduceScatter> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, GroupPtr group,
                               int64_t dim) {
    save_group(ctx, group);
    ctx->saved_data["dim"] = dim;
    return gathered(input, group, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto group = tp_group_of(ctx);
    return {own_slice(summed(grads[0], group), group, ctx->saved_data["dim"].toInt()), {}, {}};
  }
};

}  // namespace

ParallelTraffic& parallel_traffic() {
  static ParallelTraffic traffic;
  return traffic;
}

torch::Tensor copy_to_group(const torch::Tensor& input, const GroupPtr& group) {
  return CopyToGroup::apply(input, group);
}
torch::Tensor reduce_from_group(const torch::Tensor& input, const GroupPtr& group) {
  return ReduceFromGroup::apply(input, group);
}
torch::Tensor gather_last_dim(const torch::Tensor& input, const GroupPtr& group) {
  return GatherDim::apply(input, group, input.dim() - 1);
}
torch::Tensor split_last_dim(const torch::Tensor& input, const GroupPtr& group) {
  return SplitDim::apply(input, group, input.dim() - 1);
}
torch::Tensor split_dim(const torch::Tensor& input, const GroupPtr& group, int64_t dim) {
  return SplitDim::apply(input, group, dim);
}
torch::Tensor reduce_scatter_dim(const torch::Tensor& input, const GroupPtr& group, int64_t dim) {
  return ReduceScatterDim::apply(input, group, dim);
}
torch::Tensor gather_dim_for_group(const torch::Tensor& input, const GroupPtr& group, int64_t dim) {
  return GatherDimReduceScatter::apply(input, group, dim);
}

}  // namespace detail
}  // namespace accel
