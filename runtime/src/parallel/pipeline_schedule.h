#pragma once

// The pipeline schedules as torch.distributed.pipelining defines them: for each process, the order
// in which it runs the forward and backward of each (stage, microbatch). Pure arithmetic, so the
// schedules are checked (and their bubble and memory simulated) without processes; the runtime
// (pipeline_runner.h) executes them with point-to-point sends and receives.
//
// Stage s of S = pp × v lives on process s % pp (torch's "loop" placement), so with v > 1 each
// process holds v stages, pp apart.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace parallel {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved_one_f_one_b };

/// The schedule called `name` ("GPipe", "1F1B", "Interleaved1F1B"); none for another name.
std::optional<PipelineSchedule> parse_pipeline_schedule(const std::string& name);
const char* to_string(PipelineSchedule schedule);
/// The names parse_pipeline_schedule takes, for messages.
const char* pipeline_schedule_choices();

/// A pipeline's size: its processes, the stages each holds, the microbatches of one step.
struct PipelineShape {
  int64_t processes = 1;
  int64_t stages_per_process = 1;
  int64_t microbatches = 1;
  int64_t stages() const { return processes * stages_per_process; }
};

/// Why `shape` cannot run `schedule` (GPipe and 1F1B hold one stage per process; Interleaved1F1B
/// needs the microbatches to be a multiple of the processes), naming the values; empty if it can.
std::string pipeline_shape_problem(PipelineSchedule schedule, const PipelineShape& shape);

struct PipelineAction {
  bool forward = true;
  int64_t stage = 0;
  int64_t microbatch = 0;
  bool operator==(const PipelineAction& other) const {
    return forward == other.forward && stage == other.stage && microbatch == other.microbatch;
  }
};

/// The process holding stage `stage`.
inline int64_t stage_process(int64_t stage, int64_t processes) { return stage % processes; }

/// Process `rank`'s actions in the order it runs them: every microbatch's forward and backward of
/// each of its stages, once.
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, const PipelineShape& shape,
                                             int64_t rank);

/// Every process's actions run with fixed costs per stage, a send arriving at once: what the
/// schedule costs in time and memory.
struct PipelineSimulation {
  /// From the first action's start to the last's end.
  double makespan = 0;
  /// Per process: the fraction of the makespan it waits (the bubble).
  std::vector<double> idle_fraction;
  /// Per process: the most microbatches whose forward ran and backward had not, summed over its
  /// stages (the activations it holds at once).
  std::vector<int64_t> peak_in_flight;
};
/// Throws, naming the processes and what they wait for, if the schedule cannot finish.
PipelineSimulation simulate_pipeline(PipelineSchedule schedule, const PipelineShape& shape,
                                     double forward_cost, double backward_cost);

/// The bubble the schedule is known for: (pp − 1) / (m + pp − 1) for GPipe and 1F1B, and
/// (pp − 1) / (v·m + pp − 1) for Interleaved1F1B with v stages per process (Megatron's; about
/// the former divided by v when m is large beside pp).
double expected_bubble(PipelineSchedule schedule, const PipelineShape& shape);

}  // namespace parallel
}  // namespace accel
