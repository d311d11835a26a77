#pragma once

// safetensors' dtype names ("F32", "BF16", ...) and LibTorch's dtypes, both ways
// (implemented in safetensors.cpp).

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

namespace accel {
namespace util {

/// The safetensors name of a LibTorch dtype ("F32", "BF16", ...); null when it has none.
const char* safetensors_dtype_name(c10::ScalarType type);
/// The LibTorch dtype of a safetensors name; none for names LibTorch lacks (U16, F8_*, ...).
std::optional<c10::ScalarType> safetensors_torch_dtype(const std::string& name);

}  // namespace util
}  // namespace accel
