// The counted host allocator: see counting_allocator.h.

#include "counting_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace accel {
namespace util {

namespace {
// SetCPUAllocator keeps the allocator of the highest priority set so far; the counter must win
// over the default one (priority 0), and put it back with the same priority when it goes.
constexpr uint8_t kCountingPriority = 100;

/// One counted allocation: the wrapped allocator's pointer, and the counts it is part of.
struct Allocation {
  c10::DataPtr inner;
  int64_t bytes;
  std::shared_ptr<void> counts;
};

/// Every counted allocation by its data pointer: the pointers handed out are simple (context and
/// data alike), so their deleter finds what to give back here. Allocations may outlive their
/// allocator, and the registry outlives them all (it is never destroyed).
struct Registry {
  std::mutex mutex;
  std::unordered_map<void*, Allocation> allocations;
};
Registry& registry() {
  static auto* instance = new Registry;
  return *instance;
}
}  // namespace

CountingCpuAllocator::CountingCpuAllocator(int64_t cap_bytes)
    : previous_(c10::GetCPUAllocator()), cap_(cap_bytes) {
  c10::SetCPUAllocator(this, kCountingPriority);
}

CountingCpuAllocator::~CountingCpuAllocator() {
  c10::SetCPUAllocator(previous_, kCountingPriority);
}

c10::DataPtr CountingCpuAllocator::allocate(size_t bytes) {
  const auto size = static_cast<int64_t>(bytes);
  auto& counts = *counts_;
  const int64_t live = counts.live.fetch_add(size) + size;
  if (cap_ > 0 && live > cap_) {
    counts.live.fetch_sub(size);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "accel: out of host memory under the cap of ", cap_,
                     " bytes: ", live - size, " bytes are in use and ", size,
                     " more were asked for");
  }
  int64_t peak = counts.peak.load();
  while (live > peak && !counts.peak.compare_exchange_weak(peak, live)) {
  }
  auto inner = previous_->allocate(bytes);
  void* data = inner.get();
  const auto device = inner.device();
  if (data == nullptr) {
    counts.live.fetch_sub(size);
    return inner;
  }
  {
    auto& known = registry();
    std::lock_guard<std::mutex> lock(known.mutex);
    known.allocations[data] = Allocation{std::move(inner), size, counts_};
  }
  return {data, data, &CountingCpuAllocator::release, device};
}

void CountingCpuAllocator::release(void* data) {
  Allocation allocation;
  {
    auto& known = registry();
    std::lock_guard<std::mutex> lock(known.mutex);
    auto found = known.allocations.find(data);
    if (found == known.allocations.end()) return;
    allocation = std::move(found->second);
    known.allocations.erase(found);
  }
  static_cast<Counts*>(allocation.counts.get())->live.fetch_sub(allocation.bytes);
  // allocation.inner frees the memory as it goes.
}

void CountingCpuAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  default_copy_data(dest, src, count);
}

}  // namespace util
}  // namespace accel
