#pragma once

// Finding a batch size that fits (Accelerate's `find_executable_batch_size`).

#include <c10/util/Exception.h>

#include <cstdint>
#include <utility>

namespace accel {

namespace detail {
/// Whether `error` says memory ran out (a c10::OutOfMemoryError, CUDA's or cuDNN's allocation
/// failures, or the CPU allocator's).
bool is_out_of_memory(const std::exception& error);
/// Returns the caching allocator's unused device memory to the system.
void release_cached_memory();
}  // namespace detail

/// Calls `fn(batch_size)` with `starting_batch_size`, and again with half the batch size each
/// time it throws for lack of memory, releasing cached device memory in between; returns what
/// `fn` returns. Any other error goes through at once. Throws when the batch size reaches zero.
/// Build the loader (and anything sized by the batch) inside `fn`.
///
/// Example:
/// ```
/// accel::find_executable_batch_size([&](int64_t batch_size) {
///   auto loader = accelerator.prepare_data_loader(dataset, batch_size);
///   train(*loader);
/// });
/// ```
template <typename Fn>
auto find_executable_batch_size(Fn&& fn, int64_t starting_batch_size = 128) {
  for (int64_t batch_size = starting_batch_size;; batch_size /= 2) {
    TORCH_CHECK(batch_size > 0,
                "accel: find_executable_batch_size: no executable batch size "
                "found, reached zero (started at ",
                starting_batch_size, ")");
    try {
      return fn(batch_size);
    } catch (const std::exception& error) {
      if (!detail::is_out_of_memory(error)) throw;
    }
    detail::release_cached_memory();
  }
}

}  // namespace accel
