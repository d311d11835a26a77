#pragma once

// Pipeline parallelism (torch.distributed.pipelining's schedules, torchtitan's composition): a
// torch::nn::Sequential cut into stages between its children, each process of the mesh's pp
// dimension holding some of them, every step running the batch's microbatches through the
// stages in a schedule's order.
//
// accelerator.prepare_pipeline(model, options, plan) cuts `model` into pp_size × stages_per_process
// stages between its children (by parameter count, or before the children options.split_before
// names), keeps this process's stages in `model` (its parameters() are then theirs, under their
// names in the whole model: build the optimizer after) and prepares them as prepare(model, plan)
// would: placed, split by `plan` over the tp group (a plan written for the whole model: each
// stage takes the entries for its modules), sharded over dp_shard when the optimizer is prepared.
// Each child takes and returns one tensor. get_state_dict(model), save_model and clip_grad_norm_
// see the whole model; save_state and load_state move between pipeline layouts and to and from
// runs without one. With pp_size 1 (one process included) the whole model is one stage whose step
// still runs the microbatches, so one program runs on every layout. Refused before anything
// changes, naming the value and the choices: an unknown schedule, more stages than children, a
// split_before naming no child, stages_per_process above 1 outside Interleaved1F1B.
//
// Example:
// ```
// accel::Accelerator accelerator(accel::AcceleratorOptions().parallelism_config(
//     accel::ParallelismConfig().pp_size(2).dp_shard_size(2)));
// auto pipeline = accelerator.prepare_pipeline(
//     model, accel::PipelineOptions().schedule("1F1B").microbatches(4));
// auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-3));
// auto loss = pipeline.step(tokens, targets, [](const auto& logits, const auto& y) {
//   return torch::cross_entropy_loss(logits.flatten(0, 1), y.flatten());
// });
// accelerator.clip_grad_norm_(model->parameters(), 1.0);
// optimizer.step();
// optimizer.zero_grad();
// ```

#include <torch/arg.h>
#include <torch/types.h>

namespace torch {
namespace nn {
class Sequential;  // prepare_pipeline's model
}  // namespace nn
}  // namespace torch

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accel {

/// How prepare_pipeline cuts the model and a step runs it.
///
/// Example:
/// ```
/// accel::PipelineOptions().schedule("Interleaved1F1B").microbatches(8).stages_per_process(2)
/// ```
struct PipelineOptions {
  /// "GPipe" (every microbatch's forward, then every backward: holds all m microbatches'
  /// activations), "1F1B" (a forward and a backward in turn once the pipeline is full: at most
  /// pp), or "Interleaved1F1B" (1F1B over stages_per_process stages per process, pp apart: a
  /// bubble that many times smaller, more activations held).
  TORCH_ARG(std::string, schedule) = "1F1B";
  /// The microbatches a step cuts its batch into (they must divide it); 0: one per stage.
  TORCH_ARG(int64_t, microbatches) = 0;
  /// Stages each process holds (virtual stages); above 1 only with Interleaved1F1B.
  TORCH_ARG(int64_t, stages_per_process) = 1;
  /// The names of the children that start a stage after the first (one fewer than the stages,
  /// in order); empty: stages are cut to hold as equal numbers of parameters as can be.
  TORCH_ARG(std::vector<std::string>, split_before);
};

/// A loss of the last stage's output for its microbatch's targets, mean-reduced.
using PipelineLoss =
    std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

namespace detail {
struct PipelineState;  // core/pipeline_calls.cpp
}  // namespace detail

/// A prepared pipeline (Accelerator::prepare_pipeline). Copies share one pipeline.
class Pipeline {
 public:
  /// One training step's forwards and backwards: `inputs` and `targets` (the batch every process
  /// of a data rank reads) are cut into the microbatches; the first stage reads the inputs' and
  /// the last computes `loss_fn(output, target)` for each. Gradients are those of one pass over
  /// the whole batch (each microbatch's loss divided by their number, and by the accumulation
  /// steps inside accumulate()), averaged over the data-parallel processes of each stage on a
  /// synchronising step. Returns the mean of the microbatches' losses on every process of the
  /// pipeline. Then, as on one process: clip_grad_norm_, optimizer.step(), zero_grad().
  torch::Tensor step(const torch::Tensor& inputs, const torch::Tensor& targets,
                     const PipelineLoss& loss_fn);

  /// This process's stages, by their index in the pipeline (0 takes the inputs).
  std::vector<int64_t> stages() const;
  int64_t num_stages() const;
  /// The schedule's name and the microbatches of a step.
  std::string schedule() const;
  int64_t microbatches() const;

 private:
  friend class Accelerator;
  explicit Pipeline(std::shared_ptr<detail::PipelineState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::PipelineState> state_;
};

}  // namespace accel
