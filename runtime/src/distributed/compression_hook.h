#pragma once

// DDP's gradient compression hooks (Accelerate's DDPCommunicationHookType FP16 and BF16): each
// bucket is cast to a 16-bit type, divided by the process count, all-reduced so, and cast back,
// which halves the bytes on the wire at the cost of the dtype's rounding.

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <atomic>
#include <cstdint>
#include <memory>

namespace accel {
namespace distributed {

/// Bytes the hooks of one model saw: its buckets as they are, and as they were sent.
struct CompressionBytes {
  std::atomic<int64_t> buckets{0};
  std::atomic<int64_t> sent{0};
};

class CompressionHook : public c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>> {
 public:
  CompressionHook(c10::intrusive_ptr<c10d::ProcessGroup> group, c10::ScalarType dtype,
                  std::shared_ptr<CompressionBytes> bytes);
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override;

 private:
  c10::ScalarType dtype_;
  std::shared_ptr<CompressionBytes> bytes_;
};

}  // namespace distributed
}  // namespace accel
