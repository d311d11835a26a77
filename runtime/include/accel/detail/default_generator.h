#pragma once

// The default CPU generator held or set for a scope: how a prepared loader draws an epoch's order
// exactly as a plain LibTorch loader would, without moving the program's random numbers.

#include <torch/types.h>

#include <cstdint>

namespace accel {
namespace detail {

/// Sets the default CPU generator (to a seed, or to a saved state) for its lifetime and restores
/// the previous state afterwards.
class ScopedDefaultGenerator {
 public:
  explicit ScopedDefaultGenerator(uint64_t seed);
  explicit ScopedDefaultGenerator(const torch::Tensor& state);
  ~ScopedDefaultGenerator();
  ScopedDefaultGenerator(const ScopedDefaultGenerator&) = delete;
  ScopedDefaultGenerator& operator=(const ScopedDefaultGenerator&) = delete;

 private:
  torch::Tensor saved_state_;
};

/// A copy of the default CPU generator's state.
torch::Tensor default_generator_state();
/// Puts the default CPU generator in `state` (one from default_generator_state()).
void set_default_generator_state(const torch::Tensor& state);

}  // namespace detail
}  // namespace accel
