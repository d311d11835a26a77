// Exchanges between neighbours: see ring_exchange.h.

#include "ring_exchange.h"

#include "traffic.h"

#include <utility>

namespace accel {
namespace parallel {

bool groups_point_to_point(const c10d::ProcessGroup& group, c10::DeviceType device) {
  return device == c10::DeviceType::CUDA &&
         group.getBackendType() == c10d::ProcessGroup::BackendType::NCCL;
}

RingTransfer::RingTransfer(c10d::ProcessGroup& group, at::Tensor outgoing, at::Tensor incoming,
                           int tag, bool grouped)
    : outgoing_{std::move(outgoing)}, incoming_{std::move(incoming)} {
  const int cp = group.getSize(), r = group.getRank();
  const auto device = outgoing_[0].device().type();
  parallel_traffic().cp_bytes += static_cast<int64_t>(outgoing_[0].nbytes());
  if (grouped) group.startCoalescing(device);
  auto send = group.send(outgoing_, (r + 1) % cp, tag);
  auto recv = group.recv(incoming_, (r - 1 + cp) % cp, tag);
  if (grouped) {
    works_.push_back(group.endCoalescing(device));
  } else {
    works_.push_back(std::move(send));
    works_.push_back(std::move(recv));
  }
}

at::Tensor RingTransfer::wait() {
  for (auto& work : works_) {
    if (work) work->wait();
  }
  works_.clear();
  return incoming_[0];
}

}  // namespace parallel
}  // namespace accel
