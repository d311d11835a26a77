#pragma once

// The host's tensor allocator, counted (and optionally capped): the bytes LibTorch's CPU tensors
// hold now and at most, so memory bounds are checked against what was really allocated, not
// against what the code believes it holds. Installed process-wide for as long as a
// CountingCpuAllocator lives; tensors allocated before keep their own deleters and are not
// counted. Gloo's and the C library's own buffers are not LibTorch tensors and are not counted
// either: bounds built on these figures state an allocator slack for them.

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace accel {
namespace util {

class CountingCpuAllocator final : public c10::Allocator {
 public:
  /// Counts every CPU tensor allocation from now on; with `cap_bytes` > 0, an allocation that
  /// would take the live bytes past it throws c10::OutOfMemoryError naming the cap.
  explicit CountingCpuAllocator(int64_t cap_bytes = 0);
  /// Puts back the allocator that was installed before.
  ~CountingCpuAllocator() override;
  CountingCpuAllocator(const CountingCpuAllocator&) = delete;
  CountingCpuAllocator& operator=(const CountingCpuAllocator&) = delete;

  c10::DataPtr allocate(size_t bytes) override;
  /// Its pointers are simple (the context is the data), as some kernels' raw_allocate needs.
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  /// Bytes of counted tensors alive now.
  int64_t live_bytes() const { return counts_->live.load(); }
  /// The most live bytes at once since construction or the last reset_peak().
  int64_t peak_bytes() const { return counts_->peak.load(); }
  /// Starts the peak afresh from the live bytes.
  void reset_peak() { counts_->peak.store(counts_->live.load()); }
  int64_t cap_bytes() const { return cap_; }

 private:
  /// Shared with every allocation, which may outlive the allocator.
  struct Counts {
    std::atomic<int64_t> live{0};
    std::atomic<int64_t> peak{0};
  };
  static void release(void* data);

  c10::Allocator* previous_;
  int64_t cap_;
  std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
};

}  // namespace util
}  // namespace accel
