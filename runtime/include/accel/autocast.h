#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>

namespace accel {

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
  /// when this LibTorch cannot autocast to `dtype` there (1.13's CPU autocast is bf16 only).
  AutocastGuard(c10::DeviceType device_type, c10::optional<c10::ScalarType> dtype);
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
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
};

}  // namespace accel
