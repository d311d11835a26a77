#pragma once

// Profiling a stretch of a training loop (Accelerate's `Accelerator.profile` with
// `ProfileKwargs`) through LibTorch's Kineto profiler, written as a Chrome trace
// (chrome://tracing, Perfetto, TensorBoard's profiler plugin).

#include <torch/arg.h>

#include <memory>
#include <optional>
#include <string>

namespace accel {

class Accelerator;

struct ProfileOptions {
  /// Also CUDA kernels when CUDA is available (CPU ops are always recorded).
  TORCH_ARG(bool, cuda) = true;
  /// Input shapes of each op.
  TORCH_ARG(bool, record_shapes) = false;
  /// Tensor memory allocated and freed by each op.
  TORCH_ARG(bool, profile_memory) = false;
  /// The source stack of each op.
  TORCH_ARG(bool, with_stack) = false;
  /// Estimated FLOPs of matrix multiplications and convolutions.
  TORCH_ARG(bool, with_flops) = false;
  /// Where each process writes `profile_<process index>.json` when the profile stops; empty:
  /// nowhere (the trace is dropped).
  TORCH_ARG(std::string, output_trace_dir) = "";
};

/// The profile of everything the process runs while it lives (from Accelerator::profile). It
/// stops at stop() or at its end, writes its trace, and waits for the other processes.
///
/// Example:
/// ```
/// {
///   auto profile = accelerator.profile(accel::ProfileOptions().output_trace_dir("traces"));
///   train_steps(5);
/// }  // traces/profile_0.json, traces/profile_1.json, ...
/// ```
class [[nodiscard]] Profiler {
 public:
  ~Profiler();
  Profiler(Profiler&& other) noexcept;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;
  Profiler& operator=(Profiler&&) = delete;

  /// Stops recording and writes the trace; returns its path (empty without output_trace_dir).
  /// Every process must call it (it waits for the others), as at the end of the scope.
  std::string stop();

 private:
  friend class Accelerator;
  Profiler(Accelerator* accelerator, ProfileOptions options);
  Accelerator* accelerator_;
  ProfileOptions options_;
  bool running_ = false;
};

}  // namespace accel
