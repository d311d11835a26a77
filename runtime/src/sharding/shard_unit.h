#pragma once

// One unit of OptimizerShards (its private part, shared by the three files that implement it):
// consecutive parameters of one group laid end to end, this process's slice of them, and the
// reduce-scatter of their gradients under way.

#include "optimizer_shards.h"

#include "parallel/tensor_parallel.h"

#include <torch/types.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

namespace accel {
namespace sharding {

struct OptimizerShards::Unit {
  std::vector<torch::Tensor> params;   // consecutive parameters of one group, whole, in order
  std::vector<int64_t> offsets;        // where each starts in the unit's flat range
  int64_t group = 0;                   // the optimizer parameter group it belongs to
  std::vector<int64_t> indices;        // each parameter's place in that group, as prepared
  int64_t total = 0;                   // elements of all of them
  int64_t shard_size = 0;              // elements each process owns (padding included)
  torch::Tensor flat;                  // the parameters' storage: shard_size x processes elements
  torch::Tensor shard;                 // the optimizer's parameter: this process's slice of `flat`
                                       // (a host copy of it under CPU offload)
  torch::TensorOptions compute;        // the parameters' dtype and device
  std::shared_ptr<Gathered> gathered;  // FULL_SHARD: no `flat`; the unit gathered on demand

  // A reduce-scatter under way: the gradients sent (one flat copy) and this process's sum.
  std::vector<bool> ready;  // parameters whose gradient this backward has finished
  size_t ready_count = 0;
  c10::intrusive_ptr<c10d::Work> work;
  torch::Tensor sent, received;

  /// Parameter i's place in `flat`, shaped as the parameter.
  torch::Tensor slot(size_t i) const {
    return flat.narrow(0, offsets[i], params[i].numel()).view(params[i].sizes());
  }
  /// Makes parameter i's data its slot in `flat` (FSDP's flat parameter): the optimizer's step
  /// on the shard then updates this process's part of the parameters in place, and the
  /// all-gather writes the rest, with no second copy of the parameters. When something replaced
  /// a parameter's data since (model->to(), a load that assigns), its values are the newer ones:
  /// they are copied into the slot first.
  void bind(size_t i) {
    auto& param = params[i];
    auto place = slot(i);
    if (param.data_ptr() == place.data_ptr() && param.sizes() == place.sizes()) return;
    place.copy_(param.detach());
    parallel::set_data_keeping_slice(param, place);
  }
  /// The part of parameter i inside [begin, end) of the flat range: {start in the parameter,
  /// start in the range, length}; length 0 when they do not meet.
  std::tuple<int64_t, int64_t, int64_t> overlap(size_t i, int64_t begin, int64_t end) const {
    const int64_t first = std::max(offsets[i], begin);
    const int64_t last = std::min(offsets[i] + params[i].numel(), end);
    if (last <= first) return {0, 0, 0};
    return {first - offsets[i], first - begin, last - first};
  }
  /// The shard's dtype and device (the host's under CPU offload).
  torch::TensorOptions options() const { return shard.options().requires_grad(false); }
  /// This process's slice of `flat` (ZeRO-1 and -2).
  torch::Tensor own_slice(int64_t rank) const {
    return flat.narrow(0, rank * shard_size, shard_size);
  }
  bool any_gradient() const {
    return std::any_of(params.begin(), params.end(),
                       [](const torch::Tensor& p) { return p.grad().defined(); });
  }
};

}  // namespace sharding
}  // namespace accel
