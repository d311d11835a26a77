#pragma once

#include <cstddef>
#include <cstdint>

namespace accel {

/// How `Accelerator::reduce` combines the processes' tensors.
enum class Reduction { Sum, Mean, Max, Min };

namespace detail {

/// The slice [begin, end) of `size` items that process `index` of `count` takes in
/// split_between_processes, and the size every slice has after padding.
struct SplitRange {
  size_t begin = 0;
  size_t end = 0;
  size_t padded_size = 0;
};
SplitRange split_range(size_t size, int64_t count, int64_t index, bool apply_padding);

}  // namespace detail
}  // namespace accel
