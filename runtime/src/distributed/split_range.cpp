// split_between_processes's arithmetic (accel/operations.h): which items each process takes.

#include <accel/operations.h>

#include <algorithm>

namespace accel::detail {

SplitRange split_range(size_t size, int64_t count, int64_t index, bool apply_padding) {
  const size_t n = static_cast<size_t>(count);
  const size_t i = static_cast<size_t>(index);
  const size_t per_process = size / n;
  const size_t extras = size % n;
  SplitRange range;
  range.begin = i * per_process + std::min(i, extras);
  range.end = range.begin + per_process + (i < extras ? 1 : 0);
  range.padded_size = apply_padding ? per_process + (extras > 0 ? 1 : 0) : range.end - range.begin;
  return range;
}

}  // namespace accel::detail
