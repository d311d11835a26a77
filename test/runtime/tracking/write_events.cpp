// Writes a tracked run for read_events.py to check with TensorBoard's own reader:
//   accel_tracking_writer LOGGING_DIR
// Logs known values at known steps and prints the wall-clock bounds of the run (seconds).

#include <accel/accel.h>

#include <chrono>
#include <cstdio>
#include <limits>

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s LOGGING_DIR\n", argv[0]);
    return 2;
  }
  const double before = now();
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).log_with({"all"}).project_config(
          accel::ProjectConfiguration().logging_dir(argv[1])));
  accelerator.init_trackers(
      "round_trip",
      {{"learning_rate", 3e-4}, {"batch_size", 32}, {"optimizer", "AdamW"}, {"bf16", true}});
  for (int64_t step = 0; step < 5; ++step) {
    accelerator.log({{"loss", 1.0 / (step + 1)}, {"epoch", step / 2}}, step * 10);
  }
  // Left out with a message; the next values still go through.
  accelerator.log({{"loss", std::numeric_limits<double>::quiet_NaN()}, {"accuracy", 0.5}}, 50);
  accelerator.log({{"note", "warmup done"}}, 60);
  accelerator.end_training();
  std::printf("%.6f %.6f\n", before, now());
  return 0;
}
