// Two processes (run under `accel launch --num_processes 2`). What a synchronising backward pays
// for a walk of the loss's graph: DDP walks it only under find_unused_parameters, and so does
// accel (without the option, a hook on each parameter sees what backward reaches). A deep,
// narrow residual model (a graph of many small nodes, the shape where the walk's host time
// shows, as on a GPU, whose kernels are fast) trains through accelerator.backward; each
// repetition times steps without the walk (accel now) and steps that walk the graph first
// (what every backward did before), interleaved. Prints the median step times and their ratio.
//   Run: build/launcher/accel launch --num_processes 2 build/bench/accel_bench_backward_walk
//        [repetitions] [blocks] [width]

#include "bench_util.h"
#include "distributed/gradient_sync.h"

#include <accel/accel.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width)
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        up(register_module("up", torch::nn::Linear(width, 2 * width))),
        down(register_module("down", torch::nn::Linear(2 * width, width))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return x + down->forward(torch::gelu(up->forward(norm->forward(x))));
  }
  torch::nn::LayerNorm norm;
  torch::nn::Linear up, down;
};
TORCH_MODULE(Block);

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 9;
  const int64_t blocks = argc > 2 ? std::atoll(argv[2]) : 48;
  const int64_t width = argc > 3 ? std::atoll(argv[3]) : 32;
  constexpr int kSteps = 20;
  torch::set_num_threads(1);
  accel::Accelerator accelerator;
  if (accelerator.num_processes() != 2) {
    std::fprintf(stderr, "run with: accel launch --num_processes 2 %s\n", argv[0]);
    return 2;
  }
  torch::manual_seed(0);
  torch::nn::Sequential model;
  for (int64_t b = 0; b < blocks; ++b) model->push_back(Block(width));
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 1e-3));
  const auto x = torch::randn({8, width});

  double walking = 0;  // seconds spent in the walks of the last steps(true)
  auto steps = [&](bool walk) {
    walking = 0;
    return accel_bench::seconds([&] {
             for (int s = 0; s < kSteps; ++s) {
               auto loss = model->forward(x).pow(2).mean();
               if (walk)
                 walking +=
                     accel_bench::seconds([&] { accel::distributed::autograd_leaves(loss); });
               accelerator.backward(loss);
               optimizer.step();
               optimizer.zero_grad();
             }
           }) /
           kSteps;
  };
  steps(false);  // warm up: the reducer rebuilds its buckets after the first backward
  std::vector<double> without, with, ratios, walks;
  for (int r = 0; r < repetitions; ++r) {
    without.push_back(steps(false));
    with.push_back(steps(true));
    ratios.push_back(with.back() / without.back());
    walks.push_back(walking / kSteps / without.back());
  }
  if (accelerator.is_main_process()) {
    std::printf(
        "backward walk: %lld blocks x %lld wide (%zu parameters); step %.3f ms without the walk, "
        "%.3f ms with it: ratio %.3f; the walk alone %.2f%% of a step without it (medians of %d)\n",
        static_cast<long long>(blocks), static_cast<long long>(width), model->parameters().size(),
        accel_bench::median(without) * 1e3, accel_bench::median(with) * 1e3,
        accel_bench::median(ratios), accel_bench::median(walks) * 100, repetitions);
  }
  return 0;
}
