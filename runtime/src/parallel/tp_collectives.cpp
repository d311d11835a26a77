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

torch::Tensor gathered(const torch::Tensor& tensor, const GroupPtr& group) {
  parallel_traffic().tp_bytes += static_cast<int64_t>(tensor.nbytes());
  return torch::cat(all_gather(*group, tensor.contiguous()), -1);
}

torch::Tensor own_slice(const torch::Tensor& tensor, const GroupPtr& group) {
  const int64_t size = group->getSize();
  const int64_t width = tensor.size(-1);
  TORCH_CHECK(width % size == 0, "accel: tensor parallelism splits a last dimension of ", width,
              " over ", size, " processes, which does not divide it");
  return tensor.narrow(-1, group->getRank() * (width / size), width / size).contiguous();
}

// The mesh's groups are made once and kept for the life of the process (DistributedState), so a
// graph may refer to its group by address.
void save_group(AutogradContext* ctx, const GroupPtr& group) {
  ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group.get()));
}

GroupPtr group_of(AutogradContext* ctx) {
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
    return {summed(grads[0], group_of(ctx)), torch::Tensor()};
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

struct GatherLastDim : torch::autograd::Function<GatherLastDim> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, GroupPtr group) {
    save_group(ctx, group);
    return gathered(input, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {own_slice(grads[0], group_of(ctx)), torch::Tensor()};
  }
};

struct SplitLastDim : torch::autograd::Function<SplitLastDim> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, GroupPtr group) {
    save_group(ctx, group);
    return own_slice(input, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {gathered(grads[0], group_of(ctx)), torch::Tensor()};
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
  return GatherLastDim::apply(input, group);
}
torch::Tensor split_last_dim(const torch::Tensor& input, const GroupPtr& group) {
  return SplitLastDim::apply(input, group);
}

}  // namespace detail
}  // namespace accel
