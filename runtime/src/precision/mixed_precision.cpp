// Accelerate's spellings of the mixed precisions (accel/mixed_precision.h).

#include <accel/mixed_precision.h>

#include <accel_common/name_table.h>

#include <array>
#include <utility>

namespace accel {

namespace {

constexpr std::array<std::pair<MixedPrecision, const char*>, 4> kPrecisions = {{
    {MixedPrecision::No, "no"},
    {MixedPrecision::Fp16, "fp16"},
    {MixedPrecision::Bf16, "bf16"},
    {MixedPrecision::Fp8, "fp8"},
}};

}  // namespace

const char* to_string(MixedPrecision precision) { return name_in(kPrecisions, precision); }

std::optional<MixedPrecision> parse_mixed_precision(std::string_view text) {
  return value_in<MixedPrecision>(kPrecisions, text);
}

}  // namespace accel
