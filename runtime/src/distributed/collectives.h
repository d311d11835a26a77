#pragma once

// Blocking collectives over a c10d process group, as the Accelerator's operations use them.

#include <accel/operations.h>

#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <string>
#include <vector>

namespace accel {
namespace detail {

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

/// Debug-mode check before a collective: throws, on every process, naming `op` and each rank's
/// shape when the shapes (or dtypes) differ, instead of letting the collective hang or fail.
void check_same_shapes(c10d::ProcessGroup& group, const std::string& op,
                       const torch::Tensor& tensor);

}  // namespace detail
}  // namespace accel
