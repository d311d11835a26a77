// One process: a small MLP training step through the Accelerator against the same plain LibTorch
// step. Prints the median over interleaved repetitions of (accelerated time / plain time).
// By default the prepared optimizer takes LibTorch's own step, as the plain loop does, so the
// ratio is accel's overhead alone (target <= 1.02); with `fused` it takes the fused step, and the
// ratio is what a user sees.
//   Run: build/bench/accel_bench_overhead [repetitions] [steps] [fused]

#include "bench_util.h"

#include <accel/accel.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

torch::nn::Sequential make_mlp() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(128, 256), torch::nn::ReLU(),
                               torch::nn::Linear(256, 256), torch::nn::ReLU(),
                               torch::nn::Linear(256, 10));
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 15;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 200;
  const bool fused = argc > 3 && std::string(argv[3]) == "fused";
  torch::set_num_threads(1);
  const auto x = torch::randn({64, 128});
  const auto y = torch::randint(0, 10, {64});

  auto plain_model = make_mlp();
  torch::optim::SGD plain_optimizer(plain_model->parameters(), 0.01);
  auto plain_step = [&] {
    plain_optimizer.zero_grad();
    torch::nn::functional::cross_entropy(plain_model->forward(x), y).backward();
    plain_optimizer.step();
  };

  accel::Accelerator accelerator(accel::AcceleratorOptions().fused_optimizer(fused));
  auto model = make_mlp();
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.01));
  auto accelerated_step = [&] {
    auto scope = accelerator.accumulate(model);
    optimizer.zero_grad();
    accelerator.backward(torch::nn::functional::cross_entropy(model->forward(x), y));
    optimizer.step();
  };

  for (int i = 0; i < 20; ++i) {  // warm-up
    plain_step();
    accelerated_step();
  }
  std::vector<double> ratios, plain_times, accel_times;
  for (int r = 0; r < repetitions; ++r) {
    auto time_plain = [&] {
      return accel_bench::seconds([&] {
        for (int s = 0; s < steps; ++s) plain_step();
      });
    };
    auto time_accelerated = [&] {
      return accel_bench::seconds([&] {
        for (int s = 0; s < steps; ++s) accelerated_step();
      });
    };
    // Alternate which runs first, so neither always inherits the other's cache and clock state.
    double plain = 0, accelerated = 0;
    if (r % 2 == 0) {
      plain = time_plain();
      accelerated = time_accelerated();
    } else {
      accelerated = time_accelerated();
      plain = time_plain();
    }
    plain_times.push_back(plain / steps);
    accel_times.push_back(accelerated / steps);
    ratios.push_back(accelerated / plain);
  }
  std::printf("overhead: plain step %.1f us, accelerated step %.1f us (medians of %d x %d steps)\n",
              accel_bench::median(plain_times) * 1e6, accel_bench::median(accel_times) * 1e6,
              repetitions, steps);
  if (fused) {
    std::printf("whole step, fused optimizer (accelerated / plain, median): %.3f\n",
                accel_bench::median(ratios));
  } else {
    std::printf("overhead ratio (accelerated / plain, median): %.3f  [target <= 1.02]\n",
                accel_bench::median(ratios));
  }
  return 0;
}
