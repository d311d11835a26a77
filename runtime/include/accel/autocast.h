#pragma once

#include <accel/detail/apply_to_tensors.h>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/arg.h>

#include <optional>
#include <string>

namespace accel {

/// How `Accelerator::autocast()` (and so `accumulate()` and `forward()`) autocast under mixed
/// precision: Accelerate's AutocastKwargs. Give it to `AcceleratorOptions().autocast(...)` for
/// every scope, or to `accelerator.autocast(...)` for one.
///
/// Example:
/// ```
/// auto fp32 = accelerator.autocast(accel::AutocastOptions().enabled(false));  // a full-precision
/// part
/// ```
struct AutocastOptions {
  /// Autocast at all; false computes in the parameters' dtype even under mixed precision.
  TORCH_ARG(bool, enabled) = true;
  /// Keep each weight's cast for the outermost scope's length (LibTorch's default, true); false
  /// casts again at every use, holding no casts.
  TORCH_ARG(std::optional<bool>, cache_enabled) = std::nullopt;
};

/// Runs the operations of its lifetime under LibTorch autocast on one device type: matmuls,
/// linear layers and convolutions compute in `dtype`, precision-sensitive operations (losses,
/// softmax, reductions) stay in fp32. The previous autocast state comes back at destruction, so
/// guards nest. `Accelerator::autocast()` and `Accelerator::accumulate()` make one from the
/// mixed_precision setting.
///
/// Example:
/// ```
/// {
///   accel::AutocastGuard bf16(torch::kCPU, torch::kBFloat16);
///   auto y = torch::matmul(a, b);  // bf16
/// }
/// auto z = torch::matmul(a, b);    // fp32 again
/// ```
class [[nodiscard]] AutocastGuard {
 public:
  /// Enables autocast to `dtype` on `device_type`; with `dtype` unset, changes nothing. Throws
  /// when LibTorch cannot autocast to `dtype` there (it can to fp16 and bf16 on CPU and CUDA).
  /// `cache_enabled`, when set, turns LibTorch's cache of casted weights on or off for the
  /// guard's lifetime. With `fp8`, the Linears convert_to_fp8 converted compute in FP8 for the
  /// guard's lifetime (mixed_precision "fp8", accel/fp8.h).
  AutocastGuard(c10::DeviceType device_type, std::optional<c10::ScalarType> dtype,
                std::optional<bool> cache_enabled = std::nullopt, bool fp8 = false);
  /// Turns autocast on `device_type` (and an FP8 scope) off for its lifetime, whatever scope
  /// it is in: a full-precision part inside a mixed-precision one (torch.autocast(enabled=False)).
  static AutocastGuard disabled(c10::DeviceType device_type);
  AutocastGuard(AutocastGuard&& other) noexcept;
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  AutocastGuard& operator=(AutocastGuard&&) = delete;
  ~AutocastGuard();

  /// Whether this guard switched autocast on.
  bool active() const { return active_; }

 private:
  c10::DeviceType device_type_;
  bool active_ = false;
  bool restores_ = false;  // changed the thread's autocast state (on or off), put back at the end
  bool previous_fp8_ = false;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
  std::optional<bool> previous_cache_;  // set when this guard changed the cache setting
};

/// `value` with every fp16 and bf16 tensor in it converted to fp32, looking through vectors,
/// pairs, tuples and maps (as Accelerate's `convert_to_fp32`): what an autocast region hands to
/// full-precision code. Other tensors and values come back unchanged, and the conversion is
/// differentiable.
template <typename T>
T convert_to_fp32(const T& value) {
  return detail::apply_to_tensors(value, [](const at::Tensor& tensor) {
    if (tensor.defined() && (tensor.scalar_type() == c10::ScalarType::Half ||
                             tensor.scalar_type() == c10::ScalarType::BFloat16)) {
      return tensor.to(c10::ScalarType::Float);
    }
    return tensor;
  });
}

}  // namespace accel
