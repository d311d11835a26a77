#pragma once

// save_model's files: a model's weights for inference or sharing, as one safetensors file or
// shards of at most max_shard_size with an index (as huggingface_hub splits), or model.pt.

#include <accel/checkpointing.h>
#include <accel/safetensors.h>

#include <torch/nn/module.h>

#include <string>

namespace accel::checkpoints {

/// Writes `module`'s weights into `dir` (on the main process; files an earlier save left there
/// in another layout go). A FULL_SHARD module's are gathered first, by every process: a
/// collective then.
void save_model(const torch::nn::Module& module, const std::string& dir,
                const SaveModelOptions& options, bool main_process);
/// The same for weights already gathered whole (a pipeline's, from its stages): safetensors only;
/// only the main process's `tensors` are read.
void save_model_tensors(const NamedTensors& tensors, const std::string& dir,
                        const SaveModelOptions& options, bool main_process);

}  // namespace accel::checkpoints
