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
  static void use_fp16_scaler(Accelerator& accelerator);
};

inline CompressedGradientBytes compressed_gradient_bytes(const Accelerator& accelerator) {
  return AcceleratorAccess::compressed_gradient_bytes(accelerator);
}

/// Gives `accelerator` the loss scaler mixed_precision fp16 gives, on any device: fp16 needs CUDA,
/// and the scaler's arithmetic and collectives are the same on the CPU. Before prepare.
inline void use_fp16_scaler(Accelerator& accelerator) {
  AcceleratorAccess::use_fp16_scaler(accelerator);
}

}  // namespace detail
}  // namespace accel
