// Pipeline parallelism's bubble and memory against the schedules' formulas (run on pp processes:
// `accel launch --num_processes 2 --parallelism_config_pp_size 2 accel_bench_pipeline`).
//
// Bubble: stages whose forward and backward sleep a fixed cost (200 ms and 400 ms per
// microbatch, split over a process's virtual stages: the figure does not depend on the machine's
// speed); each process's idle fraction of a step (the time outside the stages' costs), the median
// of 3 steps, beside (pp − 1)/(m + pp − 1) for GPipe and 1F1B and (pp − 1)/(v·m + pp − 1) for
// Interleaved1F1B. What remains over the formula is the sends and receives on the critical path.
// Memory: the activation bytes a process holds at most during a step (counted by the allocator),
// beyond what a one-microbatch step passes through, in microbatches' worth: GPipe all m, 1F1B at
// most pp on a stage.

#include "bench_util.h"
#include "pipeline_measure.h"

#include <cstdio>

int main() {
  accel::Accelerator accelerator;
  const int64_t pp =
      accelerator.parallelism_config() ? accelerator.parallelism_config()->pp_size() : 1;
  accelerator.printf(
      "pipeline bubble, pp %lld, 200 ms forward + 400 ms backward per microbatch and process "
      "(process 0 | last process):\n",
      static_cast<long long>(pp));
  accelerator.printf("%-16s %3s %3s %10s %10s %10s\n", "schedule", "m", "v", "idle", "formula",
                     "ratio");
  struct Run {
    const char* schedule;
    int64_t v, m;
  };
  for (const Run& run :
       {Run{"GPipe", 1, 4}, Run{"GPipe", 1, 8}, Run{"1F1B", 1, 4}, Run{"1F1B", 1, 8},
        Run{"Interleaved1F1B", 2, 4}, Run{"Interleaved1F1B", 2, 8}}) {
    const auto measured =
        accel_bench::measure_pipeline(accelerator, run.schedule, run.v, run.m, 3, 200, 400, 8, 256);
    const double idle = accel_bench::median(measured.idle_fractions);
    const double formula = accel_bench::expected_idle(run.schedule, pp, run.v, run.m);
    const auto all = accelerator.gather(torch::tensor({idle}));
    accelerator.printf("%-16s %3lld %3lld %5.3f|%5.3f %10.3f %5.2f|%5.2f\n", run.schedule,
                       static_cast<long long>(run.m), static_cast<long long>(run.v),
                       all[0].item<double>(), all[-1].item<double>(), formula,
                       all[0].item<double>() / formula, all[-1].item<double>() / formula);
  }
  auto peak = [&](const char* schedule, int64_t m) {
    const auto measured = accel_bench::measure_pipeline(accelerator, schedule, 1, m, 1, 0, 0);
    return static_cast<double>(measured.peak_activation_bytes) /
           static_cast<double>(measured.microbatch_bytes);
  };
  const double passing = peak("GPipe", 1) - 1;
  accelerator.printf(
      "\nactivation peak beyond a one-microbatch step's %.2f, 1 MiB microbatches "
      "(microbatches' worth; process 0 | last process):\n",
      passing);
  accelerator.printf("%-16s %3s %14s %10s\n", "schedule", "m", "peak", "bound");
  for (const int64_t m : {8, 16}) {
    for (const char* schedule : {"GPipe", "1F1B"}) {
      const auto all = accelerator.gather(torch::tensor({peak(schedule, m) - passing}));
      accelerator.printf("%-16s %3lld %6.2f|%6.2f %10s\n", schedule, static_cast<long long>(m),
                         all[0].item<double>(), all[-1].item<double>(),
                         std::string(schedule) == "GPipe" ? "m" : "<= pp");
    }
  }
  return 0;
}
