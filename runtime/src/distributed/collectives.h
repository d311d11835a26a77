#pragma once

// Blocking collectives over a c10d process group, as the Accelerator's operations use them.

#include <accel/operations.h>

#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <string>
#include <vector>

namespace accel {
namespace distributed {

/// Every process's `tensor` (same shape everywhere), in rank order.
std::vector<torch::Tensor> all_gather(c10d::ProcessGroup& group, const torch::Tensor& tensor);
/// Reduces `tensor` in place.
void all_reduce(c10d::ProcessGroup& group, torch::Tensor& tensor, Reduction reduction);
/// Overwrites `tensor` in place with process `root`'s.
void broadcast(c10d::ProcessGroup& group, torch::Tensor& tensor, int64_t root);
void barrier(c10d::ProcessGroup& group);
/// Every process's bytes, in rank order (sizes may differ).
std::vector<std::string> all_gather_bytes(c10d::ProcessGroup& group, const std::string& bytes);
/// Values of any picklable kind (tensors, numbers, strings, lists, tuples), sent pickled through
/// host memory: every process's in rank order, and process `root`'s on every process.
std::vector<c10::IValue> all_gather_ivalues(c10d::ProcessGroup& group, const c10::IValue& value);
c10::IValue broadcast_ivalue(c10d::ProcessGroup& group, const c10::IValue& value, int64_t root);

/// ACCEL_DEBUG's one check of a collective, for both its callers (the recording backend's
/// comparison of every collective, flight_recorder.cpp, and check_same_shapes): `descriptions`
/// holds every process's description of the collective it is about to enter, by rank; when they
/// differ, throws, naming `collective` and what each rank is in, instead of letting the processes
/// wait in it forever or exchange the wrong data.
void check_same_collective(const std::vector<std::string>& descriptions,
                           const std::string& collective);
/// Tensors as the flight record and the check show them: "Float[2, 3] Long[4]" (the first four).
std::string describe_tensors(const std::vector<at::Tensor>& tensors);

/// Before a collective of `tensor` whose call (`op`) the backend cannot see whole (gather_together
/// packs several tensors into one buffer): every process's `op [shape]` compared by
/// check_same_collective.
void check_same_shapes(c10d::ProcessGroup& group, const std::string& op,
                       const torch::Tensor& tensor);

}  // namespace distributed
}  // namespace accel
