#pragma once

// What the runtime's own tests read of an Accelerator and a program cannot: figures counted for
// them, kept off the public API (as sharding/optimizer_shards.h's shards_of).

#include <accel/accelerator.h>

#include <cstdint>

namespace accel {
namespace detail {

/// Under a gradient compression hook (DistributedDataParallelOptions::comm_hook), the bytes the
/// prepared models' buckets held and the bytes their all-reduces sent, so far; zeros without one.
struct CompressedGradientBytes {
  int64_t buckets = 0;
  int64_t sent = 0;
};

struct AcceleratorAccess {
  static CompressedGradientBytes compressed_gradient_bytes(const Accelerator& accelerator);
};

inline CompressedGradientBytes compressed_gradient_bytes(const Accelerator& accelerator) {
  return AcceleratorAccess::compressed_gradient_bytes(accelerator);
}

}  // namespace detail
}  // namespace accel
