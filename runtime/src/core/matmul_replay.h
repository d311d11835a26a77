#pragma once

// Op-level selective checkpointing (CheckpointOptions::save_matmuls): a checkpointed block's
// forward keeps the outputs of its matmuls (mm, addmm, bmm), and its recompute takes them back
// instead of computing them again, recomputing only the rest (the element-wise operators, which
// cost memory but little time). PyTorch builds this on saved-tensor hooks and TorchDispatchMode,
// which LibTorch's C++ API lacks; here the matmuls reach kModeDispatchKey's kernels
// (util/mode_key.h) while a record or a replay is open on the thread.

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <cstddef>
#include <optional>
#include <vector>

namespace accel {
namespace detail {

/// The matmuls' outputs of one block's forward, in the order computed.
struct MatmulRecord {
  std::vector<at::Tensor> outputs;
  size_t replayed = 0;
  int64_t bytes() const;
};

/// Records this thread's matmuls into `record` for the guard's lifetime.
class RecordMatmuls {
 public:
  explicit RecordMatmuls(MatmulRecord& record);
  ~RecordMatmuls();
  RecordMatmuls(const RecordMatmuls&) = delete;
  RecordMatmuls& operator=(const RecordMatmuls&) = delete;

 private:
  MatmulRecord* previous_;
  bool was_on_;
  bool was_replaying_;
};

/// Serves this thread's matmuls from `record`, in order, for the guard's lifetime; they take
/// part in autograd as the operators they stand for (the same gradient formulas).
class ReplayMatmuls {
 public:
  explicit ReplayMatmuls(MatmulRecord& record);
  ~ReplayMatmuls();
  ReplayMatmuls(const ReplayMatmuls&) = delete;
  ReplayMatmuls& operator=(const ReplayMatmuls&) = delete;

 private:
  MatmulRecord* previous_;
  bool was_on_;
  bool was_recording_;
};

}  // namespace detail
}  // namespace accel
