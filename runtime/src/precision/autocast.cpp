#include <accel/autocast.h>

#include "fp8_scope.h"
#include "util/torch_compat.h"

#include <c10/util/Exception.h>

namespace accel {

AutocastGuard::AutocastGuard(c10::DeviceType device_type, std::optional<c10::ScalarType> dtype,
                             std::optional<bool> cache_enabled, bool fp8)
    : device_type_(device_type) {
  if (!dtype) return;
  TORCH_CHECK(!fp8 || *dtype == c10::ScalarType::BFloat16,
              "accel: an FP8 scope autocasts the other operators to bf16, not ",
              c10::toString(*dtype));
  if (cache_enabled) {
    previous_cache_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(*cache_enabled);
  }
  TORCH_CHECK(util::autocast_supports(device_type, *dtype), "accel: autocast to ",
              c10::toString(*dtype), " is not available on ", c10::DeviceTypeName(device_type),
              " in this LibTorch");
  previous_enabled_ = util::autocast_enabled(device_type);
  previous_dtype_ = util::autocast_dtype(device_type);
  util::set_autocast_enabled(device_type, true);
  util::set_autocast_dtype(device_type, *dtype);
  at::autocast::increment_nesting();
  previous_fp8_ = precision::fp8_scope_open();
  if (fp8) precision::set_fp8_scope(true);
  active_ = true;
  restores_ = true;
}

AutocastGuard AutocastGuard::disabled(c10::DeviceType device_type) {
  AutocastGuard guard(device_type, std::nullopt);
  guard.previous_enabled_ = util::autocast_enabled(device_type);
  guard.previous_dtype_ = util::autocast_dtype(device_type);
  guard.previous_fp8_ = precision::fp8_scope_open();
  util::set_autocast_enabled(device_type, false);
  precision::set_fp8_scope(false);
  at::autocast::increment_nesting();
  guard.restores_ = true;
  return guard;
}

AutocastGuard::AutocastGuard(AutocastGuard&& other) noexcept
    : device_type_(other.device_type_),
      active_(other.active_),
      restores_(other.restores_),
      previous_fp8_(other.previous_fp8_),
      previous_enabled_(other.previous_enabled_),
      previous_dtype_(other.previous_dtype_),
      previous_cache_(other.previous_cache_) {
  other.active_ = false;
  other.restores_ = false;
  other.previous_cache_.reset();
}

AutocastGuard::~AutocastGuard() {
  if (!restores_) return;
  // As Python's autocast.__exit__: the cache of casted weights lives until the outermost scope
  // ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  util::set_autocast_enabled(device_type_, previous_enabled_);
  util::set_autocast_dtype(device_type_, previous_dtype_);
  precision::set_fp8_scope(previous_fp8_);
  if (previous_cache_) at::autocast::set_autocast_cache_enabled(*previous_cache_);
}

}  // namespace accel
