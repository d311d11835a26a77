#pragma once

// A pipeline of stages of fixed cost, measured: the fraction of a step each process waits (the
// bubble, against the schedule's formula) and the activation bytes it holds at most (counted by
// the allocator), for bench/pipeline.cpp and the pipeline tests that check its figures.
//
// Each stage is one child of a Sequential: a scale by a learned vector whose forward sleeps
// `forward_ms` and backward `backward_ms` (so the cost does not depend on the machine's load) and
// which keeps its input for backward: a microbatch's activation is its input, counted whole.

#include <accel/accel.h>

#include "util/counting_allocator.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace accel_bench {

/// The time this process has spent in the stages' costs (a sleep runs over by a wake-up's
/// latency: that is the stage's, not the pipeline's).
inline std::atomic<int64_t>& busy_nanoseconds() {
  static std::atomic<int64_t> busy{0};
  return busy;
}

/// Sleeps `ms` and counts the time taken as busy.
inline void spend(double ms) {
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  busy_nanoseconds() +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
}

/// y = x * w, with the forward and backward costs slept.
struct FixedCostFunction : torch::autograd::Function<FixedCostFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, double forward_ms, double backward_ms) {
    spend(forward_ms);
    ctx->save_for_backward({x, w});
    ctx->saved_data["backward_ms"] = backward_ms;
    return x * w;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    spend(ctx->saved_data["backward_ms"].toDouble());
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& w = saved[1];
    return {grads[0] * w, (grads[0] * x).sum(0), torch::Tensor(), torch::Tensor()};
  }
};

struct FixedCostImpl : torch::nn::Module {
  FixedCostImpl(int64_t width, double forward_ms, double backward_ms)
      : forward_ms(forward_ms), backward_ms(backward_ms) {
    weight = register_parameter("weight", torch::ones({width}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return FixedCostFunction::apply(x, weight, forward_ms, backward_ms);
  }
  torch::Tensor weight;
  double forward_ms, backward_ms;
};
TORCH_MODULE(FixedCost);

/// One schedule's run: its configuration and what was measured on this process.
struct PipelineMeasure {
  std::string schedule;
  int64_t stages_per_process = 1, microbatches = 1;
  /// Per step: the fraction of the step's wall time this process was not in a stage's cost.
  std::vector<double> idle_fractions;
  /// The most bytes the step's activations held at once on this process, and one microbatch's.
  int64_t peak_activation_bytes = 0, microbatch_bytes = 0;
};

/// Trains `steps` steps of a pipeline of pp × stages_per_process stages, each of cost
/// `forward_ms` + `backward_ms` per microbatch divided by the stages per process (so a process's
/// work per step is the same under every schedule), on rows of `width` floats.
inline PipelineMeasure measure_pipeline(accel::Accelerator& accelerator,
                                        const std::string& schedule, int64_t stages_per_process,
                                        int64_t microbatches, int64_t steps, double forward_ms,
                                        double backward_ms, int64_t rows = 64,
                                        int64_t width = 4096) {
  const int64_t pp =
      accelerator.parallelism_config() ? accelerator.parallelism_config()->pp_size() : 1;
  const int64_t stages = pp * stages_per_process;
  const double f = forward_ms / static_cast<double>(stages_per_process);
  const double b = backward_ms / static_cast<double>(stages_per_process);
  torch::nn::Sequential model;
  for (int64_t s = 0; s < stages; ++s) model->push_back(FixedCost(width, f, b));
  auto pipeline = accelerator.prepare_pipeline(model, accel::PipelineOptions()
                                                          .schedule(schedule)
                                                          .stages_per_process(stages_per_process)
                                                          .microbatches(microbatches));
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 1e-3));
  PipelineMeasure measure{schedule, stages_per_process, microbatches, {}, 0, 0};
  const auto inputs = torch::randn({rows * microbatches, width});
  const auto targets = torch::zeros({rows * microbatches, width});
  measure.microbatch_bytes = rows * width * static_cast<int64_t>(sizeof(float));
  auto loss_fn = [](const torch::Tensor& y, const torch::Tensor& t) { return (y - t).mean(); };
  for (int64_t step = 0; step < steps; ++step) {
    accelerator.wait_for_everyone();
    accel::util::CountingCpuAllocator counted;
    const int64_t before = counted.live_bytes();
    busy_nanoseconds() = 0;
    const auto start = std::chrono::steady_clock::now();
    pipeline.step(inputs, targets, loss_fn);
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const double busy_ms = static_cast<double>(busy_nanoseconds().load()) / 1e6;
    measure.idle_fractions.push_back(1.0 - busy_ms / wall_ms);
    measure.peak_activation_bytes =
        std::max(measure.peak_activation_bytes, counted.peak_bytes() - before);
    optimizer.step();
    optimizer.zero_grad();
  }
  return measure;
}

/// The schedule's bubble by its formula (parallel/pipeline_schedule.h's expected_bubble).
inline double expected_idle(const std::string& schedule, int64_t pp, int64_t stages_per_process,
                            int64_t microbatches) {
  const double v = schedule == "Interleaved1F1B" ? static_cast<double>(stages_per_process) : 1.0;
  return static_cast<double>(pp - 1) /
         (v * static_cast<double>(microbatches) + static_cast<double>(pp - 1));
}

}  // namespace accel_bench
