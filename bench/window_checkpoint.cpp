// save_state inside an accumulation window against save_state on a synchronising step, on the
// 4 x 2048 MLP with AdamW: the window's checkpoint also holds the gradients accumulated so far.
// Prints each folder's size and the median save time, and their ratios (the synchronising step's
// checkpoint is the baseline, saved interleaved with the other in the same process).
//
//   accel_bench_window_checkpoint [repeats=7] [folder=/tmp]

#include <accel/accel.h>

#include "bench_util.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

namespace {

namespace fs = std::filesystem;

uintmax_t folder_bytes(const fs::path& folder) {
  uintmax_t bytes = 0;
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (entry.is_regular_file()) bytes += entry.file_size();
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 7;
  const fs::path root =
      fs::path(argc > 2 ? argv[2] : "/tmp") / ("accel_bench_window_" + std::to_string(::getpid()));
  fs::create_directories(root);

  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).gradient_accumulation_steps(2));
  torch::nn::Sequential model;
  for (int i = 0; i < 4; ++i) model->push_back(torch::nn::Linear(2048, 2048));
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-4));
  const auto x = torch::randn({32, 2048});
  auto micro_step = [&] {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model->forward(x).pow(2).mean());
    optimizer.step();
    optimizer.zero_grad();
  };

  std::vector<double> at_sync, in_window;
  uintmax_t sync_bytes = 0, window_bytes = 0;
  for (int r = 0; r < repeats; ++r) {
    micro_step();  // the first of a window of 2
    const auto window = root / ("window_" + std::to_string(r));
    in_window.push_back(accel_bench::seconds([&] { accelerator.save_state(window.string()); }));
    micro_step();  // synchronises: the optimizer steps, the gradients are freed
    const auto sync = root / ("sync_" + std::to_string(r));
    at_sync.push_back(accel_bench::seconds([&] { accelerator.save_state(sync.string()); }));
    window_bytes = folder_bytes(window);
    sync_bytes = folder_bytes(sync);
    fs::remove_all(window);
    fs::remove_all(sync);
  }
  fs::remove_all(root);
  const double sync_s = accel_bench::median(at_sync), window_s = accel_bench::median(in_window);
  std::printf("4 x 2048 MLP, AdamW, accumulation 2, %d repeats (medians)\n", repeats);
  std::printf("  synchronising step: %7.1f MB in %6.3f s\n", sync_bytes / 1e6, sync_s);
  std::printf("  inside a window:    %7.1f MB in %6.3f s\n", window_bytes / 1e6, window_s);
  std::printf("  window / synchronising: size %.3f, time %.3f\n",
              static_cast<double>(window_bytes) / static_cast<double>(sync_bytes),
              window_s / sync_s);
  return 0;
}
