#pragma once

// Point-to-point exchanges between neighbours of a process group: the one decision of whether
// they go as one grouped call, shared by ring attention and the pipeline's runner, and ring
// attention's exchange with its two neighbours.

#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <vector>

namespace accel {
namespace parallel {

/// Whether sends and receives of tensors on `device` through `group` are issued together as one
/// coalesced group (torch's batch_isend_irecv): on NCCL, where a send holds up the stream it runs
/// on until its peer receives, so that two processes sending to each other before receiving would
/// wait for each other, and where one grouped launch is NCCL's documented pattern for an
/// exchange. Gloo runs each on its own threads, and implements no grouping.
bool groups_point_to_point(const c10d::ProcessGroup& group, c10::DeviceType device);

/// Sends `outgoing` to the next process of the ring and receives the previous one's into
/// `incoming`, asynchronously (a block's compute runs while it is under way); wait() completes
/// both and returns `incoming`. With `grouped`, the two are one coalesced call with one work.
class RingTransfer {
 public:
  RingTransfer(c10d::ProcessGroup& group, at::Tensor outgoing, at::Tensor incoming, int tag,
               bool grouped);
  RingTransfer(const RingTransfer&) = delete;
  RingTransfer& operator=(const RingTransfer&) = delete;
  at::Tensor wait();

 private:
  std::vector<at::Tensor> outgoing_, incoming_;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

}  // namespace parallel
}  // namespace accel
