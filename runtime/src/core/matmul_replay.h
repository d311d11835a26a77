#pragma once

// Op-level selective checkpointing (CheckpointOptions::save_matmuls): a checkpointed block's
// forward keeps the outputs of its matmuls (mm, addmm, bmm), and its recompute takes them back
// instead of computing them again, recomputing only the rest (the element-wise operators, which
// cost memory but little time). PyTorch builds this on saved-tensor hooks and TorchDispatchMode,
// which LibTorch's C++ API lacks; here the matmuls reach kModeDispatchKey's kernels
// (precision/mode_key.h) while a record or a replay is open on the thread.

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <cstddef>
#include <vector>

namespace accel {
namespace core {

/// The matmuls' outputs of one block's forward, in the order computed.
struct MatmulRecord {
  std::vector<at::Tensor> outputs;
  size_t replayed = 0;
};

/// For its lifetime, this thread's matmuls are recorded into `record` (Record), or served from
/// it in order (Replay), taking part in autograd as the operators they stand for (the same
/// gradient formulas).
class MatmulScope {
 public:
  enum class Kind { Record, Replay };
  MatmulScope(MatmulRecord& record, Kind kind);
  ~MatmulScope();
  MatmulScope(const MatmulScope&) = delete;
  MatmulScope& operator=(const MatmulScope&) = delete;

 private:
  MatmulRecord* previous_;
  bool was_recording_;
  bool was_replaying_;
};

}  // namespace core
}  // namespace accel
