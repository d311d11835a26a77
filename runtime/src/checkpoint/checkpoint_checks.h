#pragma once

// What load_state checks before anything is loaded, and what save_state records for it: a
// checkpoint of another run (another optimizer class, another number of parameter groups,
// another accumulation setting) is refused naming the file and the difference.

#include <accel/checkpointing.h>
#include "optim/training_loop.h"
#include "sharding/optimizer_resharding.h"
#include "sharding/optimizer_shards.h"

#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accel {
namespace checkpoints {

/// The optimizer's class, without the AcceleratedOptimizer around it ("torch::optim::AdamW").
std::string optimizer_type(const torch::optim::Optimizer& optimizer);

/// Each prepared optimizer's class, the sizes of its parameter groups and its layout (how its
/// parameters are cut from the model's: optimizer_resharding.h), as accel_state.json records
/// them.
/// With `global_indices` (a pipeline stage's, one per optimizer) members are numbered in the
/// whole model's groups.
nlohmann::json describe_optimizers(
    const optim::OptimizerRegistry& optimizers,
    const std::vector<std::shared_ptr<sharding::OptimizerShards>>& shards, int64_t tp_size,
    const std::vector<sharding::GlobalIndex>* global_indices = nullptr);

/// A pipeline's descriptions (describe_optimizers' form, each process's in rank order, members
/// numbered in the whole model) as one: each optimizer's groups hold every stage's units, in
/// stage order, each marked with its stage (taken from the stage's first process: its processes
/// describe it alike), and count every stage's parameters.
nlohmann::json merge_stage_descriptions(const std::vector<std::string>& described, int64_t pp);

/// The run's optimizers (`run`, from describe_optimizers) are of the `saved` classes, with as
/// many parameter groups; with `same_layout` (the saved strategy and process count) the groups
/// hold as many parameters. `file_of(i)` names optimizer i's file in the errors.
void check_optimizers(const nlohmann::json& saved, const nlohmann::json& run,
                      const std::string& state_path,
                      const std::function<std::string(size_t)>& file_of, bool same_layout);

/// A checkpoint taken inside an accumulation window (`window`) resumes on the process count that
/// took it; one saved with another gradient_accumulation_steps only between windows, on another
/// process count, with allow_process_count_change (keeping the global batch: 2 processes x 4
/// become 4 x 2).
void check_accumulation(const nlohmann::json& summary, const std::string& state_path,
                        int64_t saved_processes, bool window, const LoadStateOptions& options,
                        int64_t processes, int64_t steps);

}  // namespace checkpoints
}  // namespace accel
