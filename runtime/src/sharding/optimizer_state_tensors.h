#pragma once

// The per-element tensors of an optimizer's per-parameter state (Adam's moments, SGD's momentum),
// which resharding cuts and joins like the parameters they belong to. Named for the optimizers
// sharding supports; their counters (Adam's step) are one value per parameter and stay whole.

#include <torch/optim/optimizer.h>

#include <optional>
#include <vector>

namespace accel {
namespace sharding {

/// The tensors of `state` that hold one value per element of its parameter, in a fixed order per
/// optimizer type, undefined ones included (AdamW's max_exp_avg_sq without amsgrad); none when the
/// state is not SGD's, Adam's, AdamW's, Adagrad's or RMSprop's.
std::optional<std::vector<torch::Tensor*>> elementwise_state(
    torch::optim::OptimizerParamState& state);

}  // namespace sharding
}  // namespace accel
