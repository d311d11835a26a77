#pragma once

// The proof behind the CPU's exact optimizer step: before a kind of update (optimizer, dtype,
// which options are on) first takes accel's kernels (exact_cpu_step.h) in a process, probe
// parameters are stepped both by LibTorch's own step and by the kernels, and every byte of the
// parameters and the state must agree. A kind that does not (an ATen that rounds otherwise, a
// build whose compiler fused what ATen rounds twice) keeps LibTorch's own step.

#include <string>

namespace torch {
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace accel {
namespace optim {

/// Whether every CPU parameter group of `optimizer` (SGD, Adam or AdamW) is of a kind proven in
/// this process; proves the kinds not seen yet (a few hundred microseconds each, once).
bool exact_cpu_step_proven(const torch::optim::Optimizer& optimizer);

/// Why a group of `optimizer` is not proven (the first such, with what differed), or "" when
/// every group is. For ACCEL_DEBUG's report and the tests.
std::string exact_cpu_step_refusal(const torch::optim::Optimizer& optimizer);

}  // namespace optim
}  // namespace accel
