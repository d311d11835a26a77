// The schedules' orders and their simulation: see pipeline_schedule.h.

#include "pipeline_schedule.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

namespace accel {
namespace parallel {

std::optional<PipelineSchedule> parse_pipeline_schedule(const std::string& name) {
  if (name == "GPipe") return PipelineSchedule::gpipe;
  if (name == "1F1B") return PipelineSchedule::one_f_one_b;
  if (name == "Interleaved1F1B") return PipelineSchedule::interleaved_one_f_one_b;
  return std::nullopt;
}

const char* to_string(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::gpipe:
      return "GPipe";
    case PipelineSchedule::one_f_one_b:
      return "1F1B";
    case PipelineSchedule::interleaved_one_f_one_b:
      return "Interleaved1F1B";
  }
  return "?";
}

const char* pipeline_schedule_choices() { return "GPipe, 1F1B, Interleaved1F1B"; }

std::string pipeline_shape_problem(PipelineSchedule schedule, const PipelineShape& shape) {
  if (shape.microbatches < 1) {
    return "microbatches " + std::to_string(shape.microbatches) + " (expected at least 1)";
  }
  if (shape.stages_per_process < 1) {
    return "stages_per_process " + std::to_string(shape.stages_per_process) +
           " (expected at least 1)";
  }
  if (schedule != PipelineSchedule::interleaved_one_f_one_b && shape.stages_per_process != 1) {
    return std::string("schedule ") + to_string(schedule) +
           " runs one stage per process, and stages_per_process is " +
           std::to_string(shape.stages_per_process) + "; virtual stages need Interleaved1F1B";
  }
  if (schedule == PipelineSchedule::interleaved_one_f_one_b &&
      shape.microbatches % shape.processes != 0) {
    return "schedule Interleaved1F1B runs the microbatches in rounds of one per process: "
           "microbatches " +
           std::to_string(shape.microbatches) + " is not a multiple of pp_size " +
           std::to_string(shape.processes);
  }
  return "";
}

namespace {

/// 1F1B's order for one process: `warmup` forwards, then a forward and a backward in turn, then
/// the backwards left. `forward(k)` and `backward(k)` are the k-th of each.
template <typename Forward, typename Backward>
std::vector<PipelineAction> one_forward_one_backward(int64_t total, int64_t warmup,
                                                     Forward&& forward, Backward&& backward) {
  warmup = std::min(warmup, total);
  std::vector<PipelineAction> actions;
  for (int64_t k = 0; k < warmup; ++k) actions.push_back(forward(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    actions.push_back(forward(warmup + k));
    actions.push_back(backward(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) actions.push_back(backward(k));
  return actions;
}

}  // namespace

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, const PipelineShape& shape,
                                             int64_t rank) {
  const int64_t pp = shape.processes, m = shape.microbatches;
  switch (schedule) {
    case PipelineSchedule::gpipe: {
      std::vector<PipelineAction> actions;
      for (int64_t j = 0; j < m; ++j) actions.push_back({true, rank, j});
      for (int64_t j = 0; j < m; ++j) actions.push_back({false, rank, j});
      return actions;
    }
    case PipelineSchedule::one_f_one_b:
      // A stage holds at most pp − rank microbatches: those in flight to the last stage and back.
      return one_forward_one_backward(
          m, pp - rank - 1,
          [&](int64_t k) {
            return PipelineAction{true, rank, k};
          },
          [&](int64_t k) {
            return PipelineAction{false, rank, k};
          });
    case PipelineSchedule::interleaved_one_f_one_b: {
      // Megatron's order: microbatches in rounds of pp, each round through this process's
      // stages in turn (forward: first stage first; backward: last first).
      const int64_t v = shape.stages_per_process;
      auto microbatch = [&](int64_t k) { return (k / (pp * v)) * pp + k % pp; };
      auto forward = [&](int64_t k) {
        return PipelineAction{true, ((k / pp) % v) * pp + rank, microbatch(k)};
      };
      auto backward = [&](int64_t k) {
        return PipelineAction{false, (v - 1 - (k / pp) % v) * pp + rank, microbatch(k)};
      };
      return one_forward_one_backward(m * v, (pp - rank - 1) * 2 + (v - 1) * pp, forward, backward);
    }
  }
  return {};
}

PipelineSimulation simulate_pipeline(PipelineSchedule schedule, const PipelineShape& shape,
                                     double forward_cost, double backward_cost) {
  const int64_t pp = shape.processes, stages = shape.stages();
  std::vector<std::vector<PipelineAction>> actions;
  for (int64_t r = 0; r < pp; ++r) actions.push_back(pipeline_actions(schedule, shape, r));
  // When each (forward?, stage, microbatch) finished.
  std::map<std::tuple<bool, int64_t, int64_t>, double> finished;
  std::vector<size_t> next(pp, 0);
  std::vector<double> free_at(pp, 0.0), busy(pp, 0.0);
  std::vector<int64_t> in_flight(pp, 0);
  PipelineSimulation result;
  result.peak_in_flight.assign(pp, 0);
  auto done = [&](bool forward, int64_t stage, int64_t j) -> std::optional<double> {
    const auto found = finished.find({forward, stage, j});
    if (found == finished.end()) return std::nullopt;
    return found->second;
  };
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int64_t r = 0; r < pp; ++r) {
      while (next[r] < actions[r].size()) {
        const auto& a = actions[r][next[r]];
        // What this action waits for: the previous stage's forward, or the next stage's backward
        // (the last stage's backward starts from its own forward's loss).
        std::optional<double> ready = 0.0;
        if (a.forward && a.stage > 0) ready = done(true, a.stage - 1, a.microbatch);
        if (!a.forward) {
          ready = a.stage + 1 < stages ? done(false, a.stage + 1, a.microbatch)
                                       : done(true, a.stage, a.microbatch);
          TORCH_CHECK(done(true, a.stage, a.microbatch), "accel: schedule ", to_string(schedule),
                      " runs the backward of stage ", a.stage, " microbatch ", a.microbatch,
                      " before its forward on process ", r);
        }
        if (!ready) break;
        const double start = std::max(free_at[r], *ready);
        free_at[r] = start + (a.forward ? forward_cost : backward_cost);
        busy[r] += a.forward ? forward_cost : backward_cost;
        finished[{a.forward, a.stage, a.microbatch}] = free_at[r];
        in_flight[r] += a.forward ? 1 : -1;
        result.peak_in_flight[r] = std::max(result.peak_in_flight[r], in_flight[r]);
        ++next[r];
        progressed = true;
      }
    }
  }
  std::string stuck;
  for (int64_t r = 0; r < pp; ++r) {
    if (next[r] == actions[r].size()) continue;
    const auto& a = actions[r][next[r]];
    stuck += " process " + std::to_string(r) + " waits to run the " +
             (a.forward ? "forward" : "backward") + " of stage " + std::to_string(a.stage) +
             " microbatch " + std::to_string(a.microbatch) + ";";
  }
  TORCH_CHECK(stuck.empty(), "accel: schedule ", to_string(schedule), " cannot finish:", stuck);
  result.makespan = *std::max_element(free_at.begin(), free_at.end());
  for (int64_t r = 0; r < pp; ++r) result.idle_fraction.push_back(1.0 - busy[r] / result.makespan);
  return result;
}

double expected_bubble(PipelineSchedule schedule, const PipelineShape& shape) {
  const double pp = static_cast<double>(shape.processes);
  const double m = static_cast<double>(shape.microbatches);
  const double v = static_cast<double>(
      schedule == PipelineSchedule::interleaved_one_f_one_b ? shape.stages_per_process : 1);
  // Megatron's: the fill and drain take (pp − 1) stage-lengths, each 1/v of a process's share
  // of a microbatch under interleaving, beside the v·m of work.
  return (pp - 1) / (v * m + pp - 1);
}

}  // namespace parallel
}  // namespace accel
