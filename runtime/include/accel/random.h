#pragma once

// Seeding for reproducible runs (Accelerate's `set_seed`).

#include <cstdint>

namespace accel {

/// Seeds LibTorch's CPU generator and every CUDA device's, and std::rand. With `device_specific`,
/// each process adds its index to `seed`, so that processes draw different numbers (dropout,
/// augmentation) while the run stays reproducible. With `deterministic`, LibTorch uses only
/// deterministic algorithms (an op without one throws), cuDNN's autotuner is off, and
/// CUBLAS_WORKSPACE_CONFIG is set to ":4096:8" unless already set, as deterministic cuBLAS needs.
/// Call it before the model is built so its initial weights are reproducible too.
void set_seed(uint64_t seed, bool device_specific = false, bool deterministic = false);

}  // namespace accel
