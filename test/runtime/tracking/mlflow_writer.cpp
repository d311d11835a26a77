// A tracked program for mlflow_round_trip.sh: logs known values to the MLflow tracker.
//   accel_mlflow_writer STEPS DIE_AFTER LEARNING_RATE
// Every process runs the loop in step (a barrier per step). On the group's first start the main
// process kills itself with SIGKILL after logging step DIE_AFTER (-1: never), as a crash would;
// restarted by `accel launch --max_restarts`, the group goes on from the step after it, as a
// program resumed from its last checkpoint does.

#include <accel/accel.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s STEPS DIE_AFTER LEARNING_RATE\n", argv[0]);
    return 2;
  }
  const int64_t steps = std::atoll(argv[1]);
  const int64_t die_after = std::atoll(argv[2]);
  const double learning_rate = std::atof(argv[3]);
  const char* restart_count = std::getenv("ACCEL_RESTART_COUNT");
  const bool restarted = restart_count != nullptr && std::atoi(restart_count) > 0;

  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true).log_with({"mlflow"}));
  accelerator.init_trackers(
      "accel-mlflow",
      {{"learning_rate", learning_rate},
       {"batch_size", 32},
       {"optimizer", "AdamW"},
       {"bf16", true},
       {"too_long", std::string(7000, 'x')}},
      {{"mlflow", {{"run_name", "two heads"}, {"description", "accel's MLflow round trip"}}}});
  for (int64_t step = restarted ? die_after + 1 : 0; step < steps; ++step) {
    accelerator.log({{"loss", 1.0 / static_cast<double>(step + 1)},
                     {"train/accuracy", static_cast<double>(step) / 10.0},
                     {"phase", "warmup"},
                     {"grad_norm", std::numeric_limits<double>::infinity()},
                     {"bad=name", 1.0}},
                    step);
    accelerator.wait_for_everyone();
    if (!restarted && step == die_after && accelerator.is_main_process()) std::raise(SIGKILL);
  }
  accelerator.end_training();
  return 0;
}
