#pragma once

// Sizes written as Accelerate writes them, for max_shard_size and max_memory.

#include <cstdint>
#include <string>

namespace accel {

/// Bytes in a size written as Accelerate writes them: "10GB" (10^10), "100MB" (10^8), "2GiB"
/// (2 * 2^30), "512KiB", "5Gb" (gigabits: 5 * 10^9 / 8), or a plain number of bytes.
/// Throws c10::Error naming the text.
int64_t parse_size(const std::string& text);

}  // namespace accel
