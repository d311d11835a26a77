// What leaving save_state on every K steps costs (self-healing training): the median time of one
// training step of an MLP with AdamW, and of one save_state of its whole state (automatic naming,
// the last 2 kept, every file fsynced), in the same process, interleaved. Prints the ratio of a
// run that saves every K steps to one that never saves, for a few K.
//
//   accel_bench_resume_overhead [width=1024] [repeats=7] [folder=/tmp]

#include <accel/accel.h>

#include "bench_util.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

int main(int argc, char** argv) {
  const int64_t width = argc > 1 ? std::atoll(argv[1]) : 1024;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 7;
  const auto root = std::filesystem::path(argc > 3 ? argv[3] : "/tmp") /
                    ("accel_bench_resume_" + std::to_string(::getpid()));
  const int steps_per_repeat = 20;

  accel::Accelerator accelerator(
      accel::AcceleratorOptions().project_config(accel::ProjectConfiguration()
                                                     .project_dir(root.string())
                                                     .automatic_checkpoint_naming(true)
                                                     .total_limit(2)));
  torch::nn::Sequential model(torch::nn::Linear(width, width), torch::nn::ReLU(),
                              torch::nn::Linear(width, width), torch::nn::ReLU(),
                              torch::nn::Linear(width, 10));
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters()));
  const auto x = torch::randn({128, width});
  const auto y = torch::randint(10, {128});
  auto step = [&] {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(torch::cross_entropy_loss(model->forward(x), y));
    optimizer.step();
    optimizer.zero_grad();
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up: the optimizer state exists from here

  std::vector<double> step_times, save_times;
  for (int r = 0; r < repeats; ++r) {
    step_times.push_back(accel_bench::seconds([&] {
                           for (int i = 0; i < steps_per_repeat; ++i) step();
                         }) /
                         steps_per_repeat);
    save_times.push_back(accel_bench::seconds([&] { accelerator.save_state(); }));
  }
  std::filesystem::remove_all(root);

  const double step_s = accel_bench::median(step_times), save_s = accel_bench::median(save_times);
  int64_t bytes = 0;
  for (const auto& p : model->parameters()) bytes += p.numel() * p.element_size();
  std::printf(
      "model %.1f MB of weights (+ 2x in AdamW state); median step %.2f ms, median "
      "save_state %.1f ms (= %.1f steps)\n",
      bytes / 1e6, step_s * 1e3, save_s * 1e3, save_s / step_s);
  for (int k : {10, 100, 1000}) {
    std::printf("saving every %4d steps: %.3f x the time of never saving\n", k,
                (k * step_s + save_s) / (k * step_s));
  }
  return 0;
}
