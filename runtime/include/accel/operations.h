#pragma once

#include <torch/arg.h>

#include <cstddef>
#include <cstdint>

namespace accel {

/// How `Accelerator::pad_across_processes` pads (Accelerate's dim, pad_index, pad_first).
struct PadOptions {
  /// The dimension padded to the longest any process has.
  TORCH_ARG(int64_t, dim) = 0;
  /// The value the padding holds.
  TORCH_ARG(double, pad_index) = 0;
  /// Pad before the tensor's values instead of after them.
  TORCH_ARG(bool, pad_first) = false;
};

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
