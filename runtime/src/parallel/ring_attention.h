#pragma once

// Ring attention over a context-parallel group (see accel/context_parallel.h): the autograd
// function whose forward and backward pass K/V blocks around the group.

#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <optional>

namespace accel {
namespace parallel {

/// Attention of this process's queries (its load-balanced shard: chunks r and 2 * cp - 1 - r of
/// the sequence, along dim 2 of [batch, heads, sequence, head_dim]) over every process's keys
/// and values. Collective over `group` in forward and in backward. The group must outlive the
/// graph (the mesh's groups live as long as the process).
torch::Tensor ring_attention(const torch::Tensor& query, const torch::Tensor& key,
                             const torch::Tensor& value, c10d::ProcessGroup& group, bool is_causal,
                             std::optional<double> scale);

}  // namespace parallel
}  // namespace accel
