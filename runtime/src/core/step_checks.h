#pragma once

// The comparison ACCEL_DEBUG adds after a prepared optimizer's step on several processes: every
// process must hold the same parameters (optim::StepChecks runs it).

#include "optim/training_loop.h"

#include <memory>

namespace accel {
namespace distributed {
class DistributedState;
}  // namespace distributed

namespace core {

/// A hash of each parameter a non-sharded prepared optimizer holds (whole, as NO_SHARD keeps
/// them), compared across the processes of `dist`'s host group; a difference throws on every
/// process, naming the first parameter that differs.
optim::StepChecks::Comparison parameter_comparison(
    std::shared_ptr<distributed::DistributedState> dist);

}  // namespace core
}  // namespace accel
