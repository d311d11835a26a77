// libFuzzer target for the safetensors header parser. Any input must either be rejected with a
// SafetensorsError or yield a header whose tensors provably fit the buffer: a reader that trusts
// an accepted header (mmap views, pread into parameters) must never read outside the file.

#include "accel_common/safetensors_header.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "accepted header breaks an invariant: %s\n", what);
  std::abort();
}

void check_accepted(const accel::detail::SafetensorsHeader& header, size_t size) {
  require(8 + header.header_bytes + header.data_bytes == size, "header and data cover the file");
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.tensors) {
    require(entry.begin <= entry.end && entry.end <= header.data_bytes, "range inside the buffer");
    const int64_t element = accel::detail::safetensors_dtype_size(entry.dtype);
    require(element > 0, "known dtype");
    for (int64_t extent : entry.shape) require(extent >= 0, "non-negative extents");
    require(static_cast<uint64_t>(entry.numel()) * static_cast<uint64_t>(element) ==
                entry.end - entry.begin,
            "shape x dtype equals the byte range");
    ranges.emplace_back(entry.begin, entry.end);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    require(begin == covered, "ranges neither overlap nor leave gaps");
    covered = end;
  }
  require(covered == header.data_bytes, "ranges cover the buffer");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto header = accel::detail::parse_safetensors_header(
        "fuzz-input", reinterpret_cast<const char*>(data), size);
    check_accepted(header, size);
  } catch (const accel::detail::SafetensorsError&) {
    // Rejected with a message: the expected outcome for malformed input.
  }
  return 0;
}
