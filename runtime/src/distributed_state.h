#pragma once

// The process-wide part of an Accelerator (Accelerate's PartialState): who this process is and
// the c10d process group it talks through. Created by the first Accelerator and kept for the life
// of the process, as torch.distributed's default group is.

#include "environment.h"

#include <accel/options.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/types.h>

#include <memory>
#include <string>

namespace accel {
namespace detail {

class DistributedState {
 public:
  /// The process's state, created on first use from the environment and `options`.
  static std::shared_ptr<DistributedState> get(const ResolvedOptions& options);

  const ProcessIdentity& identity() const { return identity_; }
  int64_t rank() const { return identity_.rank; }
  int64_t world_size() const { return identity_.world_size; }
  /// The collective group; null in a one-process job.
  const c10::intrusive_ptr<c10d::ProcessGroup>& group() const { return group_; }
  /// "gloo", "nccl", or "none" for one process.
  const std::string& backend() const { return backend_; }

  /// The device for an Accelerator of this process: `cuda:LOCAL_RANK` when CUDA is available and
  /// `cpu` is false, else the CPU.
  torch::Device device(bool cpu) const;

 private:
  DistributedState(ProcessIdentity identity, const ResolvedOptions& options);

  ProcessIdentity identity_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::string backend_ = "none";
};

}  // namespace detail
}  // namespace accel
