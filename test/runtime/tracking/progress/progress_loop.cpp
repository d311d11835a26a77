// A training-shaped loop for the terminal test: a prepared loader of 16 batches per process,
// walked with accel::progress and slowed down so the bar can be seen mid-run, with log lines
// before, during and after it.

#include <accel/accel.h>

#include "support/datasets.h"

#include <chrono>
#include <thread>

int main() {
  accel::Accelerator accelerator;
  auto logger = accel::get_logger("progress_loop");
  auto loader = accelerator.prepare_data_loader<torch::data::samplers::SequentialSampler>(
      accel_test::RangeDataset(32 * accelerator.num_processes()), 2);
  logger.info("starting {} batches", loader->size());
  auto batches = accel::progress(*loader, accel::ProgressOptions().description("train"));
  int64_t seen = 0;
  for ([[maybe_unused]] auto& batch : batches) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    batches.bar().set_postfix({{"loss", 1.0 / static_cast<double>(++seen)}});
    if (seen == 8) logger.info("halfway");
  }
  batches.bar().close();
  logger.info("finished");
  return 0;
}
