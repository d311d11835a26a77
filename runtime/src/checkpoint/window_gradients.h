#pragma once

// What an accumulation window has gathered so far, for a checkpoint taken inside one: the
// gradients every process has accumulated locally since the last synchronising micro-step.
//
// Inside a window no strategy has synchronised anything yet: under NO_SHARD, SHARD_OPTIMIZER_STATE
// and SHARD_GRAD_OP the local gradients are whole, in the parameters' grad(); under FULL_SHARD
// the sharded parameters' grad() holds them too (the reduce-scatter waits for the synchronising
// backward, as FSDP's no_sync). So one rule serves every strategy: each process writes every
// defined gradient of the prepared models' parameters, and of the optimizers' parameters that no
// model holds (a sharded optimizer's shards), to its own file. Restoring them puts the next
// synchronising step exactly where the uninterrupted run has it.

#include <accel/safetensors.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <string>
#include <vector>

namespace accel {
namespace checkpoints {

/// This process's file of window gradients in a checkpoint folder.
std::string window_gradients_file(int64_t process);

/// Every defined gradient, named "model_<i>.<parameter name>" or, for an optimizer parameter no
/// model holds, "optimizer_<i>.<group>.<index>". The optimizers' gates must be open.
NamedTensors window_gradients(const std::vector<torch::nn::Module*>& models,
                              const std::vector<torch::optim::Optimizer*>& optimizers);

/// Makes the gradients those of `saved` (read from `path`): named ones are copied in, every other
/// gradient of those parameters is dropped. An empty `saved` drops them all (a checkpoint taken
/// between windows). A name the run does not have, or a shape it does not match, is an error
/// naming `path`, raised before any gradient is changed.
void restore_window_gradients(const std::vector<torch::nn::Module*>& models,
                              const std::vector<torch::optim::Optimizer*>& optimizers,
                              const std::map<std::string, torch::Tensor>& saved,
                              const std::string& path);

}  // namespace checkpoints
}  // namespace accel
