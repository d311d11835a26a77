#pragma once

// What an accel::checkpoint block's node tells a walk of the autograd graph: the parameters the
// block uses are not in the graph until backward runs the block again.

#include <accel/activation_checkpoint.h>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>

#include <optional>
#include <vector>

namespace accel {
namespace core {

struct CheckpointedParameters {
  std::vector<at::Tensor> parameters;  // those the block uses, as far as known
  bool known = false;  // a CheckpointWrapper's (its module's); a free lambda's are not
};

/// Throws naming the choices for a policy apply_activation_checkpointing cannot follow.
void check_checkpoint_policy(const CheckpointPolicy& policy);

/// For a checkpoint block's node, the parameters the block uses; std::nullopt for any other node.
std::optional<CheckpointedParameters> checkpointed_parameters(const torch::autograd::Node& node);

}  // namespace core
}  // namespace accel
