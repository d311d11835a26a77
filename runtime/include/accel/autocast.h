#pragma once

#include <accel/detail/apply_to_tensors.h>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

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
  /// when LibTorch cannot autocast to `dtype` there (it can to fp16 and bf16 on CPU and CUDA).
  AutocastGuard(c10::DeviceType device_type, std::optional<c10::ScalarType> dtype);
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
