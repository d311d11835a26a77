#include "compression_hook.h"

#include <ATen/ATen.h>

#include <utility>
#include <vector>

namespace accel {
namespace distributed {

CompressionHook::CompressionHook(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                 c10::ScalarType dtype, std::shared_ptr<CompressionBytes> bytes)
    : CppCommHookInterface(std::move(group)), dtype_(dtype), bytes_(std::move(bytes)) {}

c10::intrusive_ptr<c10::ivalue::Future> CompressionHook::runHook(c10d::GradBucket& bucket) {
  auto& buffer = bucket.getBufferRef();
  // Divided before the sum, as PyTorch's fp16_compress_hook does: a sum of N fp16 values could
  // overflow where their mean does not. (With a hook the reducer does not divide.)
  auto compressed = buffer.to(dtype_).div_(state_->getSize());
  bytes_->buckets += static_cast<int64_t>(buffer.nbytes());
  bytes_->sent += static_cast<int64_t>(compressed.nbytes());
  std::vector<at::Tensor> tensors{compressed};
  auto sum = state_->allreduce(tensors)->getFuture();
  return sum->then(
      [buffer](c10::ivalue::Future& done) {
        // A tensor handle: copy_ writes the bucket's memory, which the handle shares.
        auto bucket = buffer;
        bucket.copy_(done.value().toTensorVector().at(0));
        return c10::IValue(bucket);
      },
      c10::TensorType::get());
}

}  // namespace distributed
}  // namespace accel
