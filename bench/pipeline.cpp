// Pipeline parallelism's bubble and memory against the schedules' formulas (run on pp processes:
// `accel launch --num_processes 2 --parallelism_config_pp_size 2 accel_bench_pipeline`).
//
// Bubble: stages whose forward and backward sleep a fixed cost (so the figure does not depend on
// the machine's load); each process's idle fraction of a step, the median of 5 steps, beside
// (pp − 1)/(m + pp − 1) for GPipe and 1F1B and (pp − 1)/(v·m + pp − 1) for Interleaved1F1B.
// Memory: the activation bytes a process holds at most during a step (counted by the allocator),
// in microbatches' worth, for GPipe (all m) and 1F1B (at most pp on a stage).

#include "bench_util.h"
#include "pipeline_measure.h"

#include <cstdio>

int main() {
  accel::Accelerator accelerator;
  const int64_t pp =
      accelerator.parallelism_config() ? accelerator.parallelism_config()->pp_size() : 1;
  accelerator.printf(
      "pipeline bubble, pp %lld, stages of 40 ms forward + 80 ms backward per "
      "microbatch (process 0 | last process):\n",
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
        accel_bench::measure_pipeline(accelerator, run.schedule, run.v, run.m, 5, 40, 80, 8, 256);
    const double idle = accel_bench::median(measured.idle_fractions);
    const double formula = accel_bench::expected_idle(run.schedule, pp, run.v, run.m);
    const auto all = accelerator.gather(torch::tensor({idle}));
    accelerator.printf("%-16s %3lld %3lld %5.3f|%5.3f %10.3f %5.2f|%5.2f\n", run.schedule,
                       static_cast<long long>(run.m), static_cast<long long>(run.v),
                       all[0].item<double>(), all[-1].item<double>(), formula,
                       all[0].item<double>() / formula, all[-1].item<double>() / formula);
  }
  accelerator.printf(
      "\nactivation peak, 1 MiB microbatches (counted bytes / one microbatch's; "
      "process 0 | last process):\n");
  accelerator.printf("%-16s %3s %14s %10s\n", "schedule", "m", "peak", "bound");
  for (const int64_t m : {8, 16}) {
    for (const char* schedule : {"GPipe", "1F1B"}) {
      const auto measured = accel_bench::measure_pipeline(accelerator, schedule, 1, m, 1, 0, 0);
      const double peak = static_cast<double>(measured.peak_activation_bytes) /
                          static_cast<double>(measured.microbatch_bytes);
      const auto all = accelerator.gather(torch::tensor({peak}));
      accelerator.printf("%-16s %3lld %6.2f|%6.2f %10s\n", schedule, static_cast<long long>(m),
                         all[0].item<double>(), all[-1].item<double>(),
                         std::string(schedule) == "GPipe" ? ">= m" : "<= pp + 3");
    }
  }
  return 0;
}
