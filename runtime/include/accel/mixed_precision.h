#pragma once

// The mixed precision a run trains in (Accelerate's mixed_precision), as `Accelerator::options()`
// gives it. Text is parsed into it once, where it is read; to_string gives Accelerate's
// spelling back.

#include <optional>
#include <ostream>
#include <string_view>

namespace accel {

enum class MixedPrecision {
  No,    ///< "no": fp32
  Fp16,  ///< "fp16": autocast to float16, with loss scaling
  Bf16,  ///< "bf16": autocast to bfloat16
  Fp8,   ///< "fp8": needs an FP8 backend accel does not have; refused at construction
};

/// "no", "fp16", "bf16" or "fp8".
const char* to_string(MixedPrecision precision);
/// The precision Accelerate's spelling names; none for another text.
std::optional<MixedPrecision> parse_mixed_precision(std::string_view text);

inline std::ostream& operator<<(std::ostream& out, MixedPrecision precision) {
  return out << to_string(precision);
}

// Until 0.x this was a string: comparing with the old spelling still compiles, for a release.
[[deprecated("compare with an accel::MixedPrecision, e.g. MixedPrecision::Bf16")]] inline bool
operator==(MixedPrecision precision, std::string_view text) {
  return text == to_string(precision);
}
[[deprecated("compare with an accel::MixedPrecision, e.g. MixedPrecision::Bf16")]] inline bool
operator!=(MixedPrecision precision, std::string_view text) {
  return text != to_string(precision);
}

}  // namespace accel
