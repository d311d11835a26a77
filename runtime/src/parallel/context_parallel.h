#pragma once

// Context parallelism's process-local parts (accel/context_parallel.h): the thread's cp group,
// which a ContextParallelScope sets, and the load-balanced shard of a buffer.

#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstddef>
#include <cstdint>

namespace accel {
namespace parallel {

/// Makes `group` the cp group accel::scaled_dot_product_attention rings over on this thread
/// (null: none, LibTorch's attention); returns the one it replaces.
c10d::ProcessGroup* set_context_group(c10d::ProcessGroup* group);

/// Process `rank`'s load-balanced shard of `tensor` along `dim` in a ring of `cp`: chunks rank
/// and 2 * cp - 1 - rank of 2 * cp. A length 2 * cp does not divide is refused, naming the
/// buffer by its `index` among maybe_context_parallel's.
torch::Tensor load_balanced_shard(const torch::Tensor& tensor, int64_t dim, int64_t rank,
                                  int64_t cp, size_t index);

}  // namespace parallel
}  // namespace accel
