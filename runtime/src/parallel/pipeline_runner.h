#pragma once

// One process's part of a pipeline step: its stages run each microbatch's forward and backward
// in the schedule's order (pipeline_schedule.h), activations and their gradients travelling to
// the neighbouring stages by point-to-point sends and receives on the mesh's pp group. What the
// Accelerator adds around a stage (autocast, the loss's scaling) comes in as functions; gradient
// synchronisation, clipping and the optimizer's step are the Accelerator's, after the step.

#include "pipeline_schedule.h"

#include <torch/nn/modules/container/sequential.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace accel {
namespace parallel {

/// One stage: its index in the pipeline and the children of the model it holds.
struct PipelineStage {
  int64_t index = 0;
  torch::nn::Sequential module;
};

/// What a step needs of its caller.
struct PipelineStepCalls {
  /// Runs `stage` on `input` (under the run's autocast).
  std::function<torch::Tensor(torch::nn::Sequential& stage, const torch::Tensor& input)> forward;
  /// The loss of the last stage's `output` for `target`.
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  /// What backward starts from for one microbatch's loss (divided by the microbatches and the
  /// accumulation, scaled by the fp16 scaler).
  std::function<torch::Tensor(const torch::Tensor& loss)> scale_loss;
};

class PipelineRunner {
 public:
  /// `group`: the pp group (null when pp_size is 1); `stages`: this process's, in stage order;
  /// `device`: where they compute, and activations arrive.
  PipelineRunner(PipelineSchedule schedule, PipelineShape shape, int64_t rank,
                 c10::intrusive_ptr<c10d::ProcessGroup> group, std::vector<PipelineStage> stages,
                 torch::Device device);

  /// Runs every microbatch of `inputs` (read by the first stage) and `targets` (by the last)
  /// through this process's stages; returns the mean of the microbatches' losses on every
  /// process of the pipeline.
  torch::Tensor step(const torch::Tensor& inputs, const torch::Tensor& targets,
                     const PipelineStepCalls& calls);

  PipelineSchedule schedule() const { return schedule_; }
  const PipelineShape& shape() const { return shape_; }
  const std::vector<PipelineStage>& stages() const { return stages_; }
  /// The schedule this process runs.
  const std::vector<PipelineAction>& actions() const { return actions_; }

 private:
  struct Microbatch;  // one (stage, microbatch)'s tensors between its forward and backward
  class Link;         // the sends and receives of one step
  struct StepState;   // what one step's actions share

  PipelineStage& local_stage(int64_t index);
  bool on_here(int64_t stage) const { return stage_process(stage, shape_.processes) == rank_; }
  void run_forward(const PipelineAction& action, StepState& step, const PipelineStepCalls& calls);
  void run_backward(const PipelineAction& action, StepState& step, const PipelineStepCalls& calls);
  /// Fills gradient_releases_ from the previous stages' schedules.
  void release_points();

  PipelineSchedule schedule_;
  PipelineShape shape_;
  int64_t rank_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::vector<PipelineStage> stages_;
  std::vector<PipelineAction> actions_;
  torch::Device device_;
  /// (stage, microbatch) of an activation whose arrival proves that the gradients this process
  /// sent for these microbatches (to the stage before) were received.
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> gradient_releases_;
};

}  // namespace parallel
}  // namespace accel
