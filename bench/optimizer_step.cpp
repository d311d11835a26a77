// Optimizer step time: a prepared optimizer (ATen's fused kernel) against LibTorch's own step on
// the same parameters, for AdamW, Adam and SGD with momentum, on the parameters of a compute-bound
// MLP (4 layers of 2048, 16.8M parameters) and an overhead-bound one (3 layers of 256). Then the
// whole training step with AdamW (batch 64): accel's prepared model and optimizer against the
// plain LibTorch loop. Steps alternate between the two in rounds; figures are ratios of medians.
//   accel_bench_optimizer_step [ROUNDS]

#include <accel/accel.h>
#include <torch/torch.h>

#include "bench_util.h"
#include "vs_accelerate/job.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>

namespace {

std::vector<torch::Tensor> mlp_parameters(int64_t width, int64_t depth) {
  std::vector<torch::Tensor> params;
  for (int64_t i = 0; i < depth; ++i) {
    params.push_back(torch::randn({width, width}) * 0.02);
    params.push_back(torch::zeros({width}));
  }
  params.push_back(torch::randn({1, width}) * 0.02);
  params.push_back(torch::zeros({1}));
  for (auto& p : params) {
    p.requires_grad_(true);
    p.mutable_grad() = torch::randn_like(p) * 1e-3;
  }
  return params;
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) {
    auto copy = p.detach().clone().requires_grad_(true);
    copy.mutable_grad() = p.grad().clone();
    out.push_back(copy);
  }
  return out;
}

std::vector<double> handover_share;  // per comparison: step-count handover / fused step

template <typename O, typename Options>
void compare(accel::Accelerator& accelerator, const std::string& model, int64_t width,
             int64_t depth, const std::string& name, const Options& options, int rounds) {
  auto params = mlp_parameters(width, depth);
  auto fused_params = copies(params);
  O plain(params, options);
  auto prepared = accelerator.prepare(O(fused_params, options));
  const int steps = width >= 1024 ? 3 : 50;  // per round, so a round takes milliseconds or more
  std::vector<double> own, fused;
  for (int round = 0; round < rounds + 2; ++round) {  // the first two rounds warm up
    const double a = accel_bench::seconds([&] {
      for (int i = 0; i < steps; ++i) plain.step();
    });
    const double b = accel_bench::seconds([&] {
      for (int i = 0; i < steps; ++i) prepared.step();
    });
    if (round < 2) continue;
    own.push_back(a / steps);
    fused.push_back(b / steps);
  }
  const double own_ms = accel_bench::median(own) * 1e3, fused_ms = accel_bench::median(fused) * 1e3;
  // Adam's kernels read the step count from a float tensor per parameter, LibTorch keeps an
  // integer: what handing it over costs each step, against the whole fused step.
  if constexpr (!std::is_same_v<O, torch::optim::SGD>) {
    std::vector<double> handover;
    for (int round = 0; round < rounds; ++round) {
      handover.push_back(accel_bench::seconds([&] {
                           for (int i = 0; i < steps; ++i) {
                             for (const auto& p : fused_params) {
                               [[maybe_unused]] auto step = torch::full(
                                   {}, 1.0 * i, torch::dtype(torch::kFloat).device(p.device()));
                             }
                           }
                         }) /
                         steps);
    }
    handover_share.push_back(accel_bench::median(handover) * 1e3 / fused_ms);
  }
  std::printf("| %s | %s | %.3f ms | %.3f ms | %.2f |\n", model.c_str(), name.c_str(), own_ms,
              fused_ms, fused_ms / own_ms);
}

void whole_step(accel::Accelerator& accelerator, const std::string& model_name, int64_t width,
                int64_t depth, int rounds) {
  const auto x = torch::randn({64, width});
  const auto y = torch::randn({64, 1});
  torch::manual_seed(0);
  auto plain_model = accel_vs::build_mlp(width, depth);
  torch::optim::AdamW plain_optimizer(plain_model->parameters(), torch::optim::AdamWOptions(1e-3));
  torch::manual_seed(0);
  auto model = accel_vs::build_mlp(width, depth);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(
      torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-3)));
  const int steps = width >= 1024 ? 3 : 50;
  std::vector<double> plain, accelerated;
  for (int round = 0; round < rounds + 2; ++round) {
    const double a = accel_bench::seconds([&] {
      for (int i = 0; i < steps; ++i) {
        plain_optimizer.zero_grad();
        torch::mse_loss(plain_model->forward(x), y).backward();
        plain_optimizer.step();
      }
    });
    const double b = accel_bench::seconds([&] {
      for (int i = 0; i < steps; ++i) {
        auto scope = accelerator.accumulate(model);
        optimizer.zero_grad();
        accelerator.backward(torch::mse_loss(model->forward(x), y));
        optimizer.step();
      }
    });
    if (round < 2) continue;
    plain.push_back(a / steps);
    accelerated.push_back(b / steps);
  }
  const double plain_ms = accel_bench::median(plain) * 1e3;
  const double accel_ms = accel_bench::median(accelerated) * 1e3;
  std::printf("| %s | %.3f ms | %.3f ms | %.2f |\n", model_name.c_str(), plain_ms, accel_ms,
              accel_ms / plain_ms);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  std::printf("median of %d rounds; %d thread(s)\n", rounds, torch::get_num_threads());
  std::printf("| model | optimizer | LibTorch's step | fused step | fused / LibTorch |\n");
  std::printf("|---|---|---|---|---|\n");
  for (auto [model, width, depth] :
       {std::tuple<const char*, int64_t, int64_t>{"4 x 2048", 2048, 4}, {"3 x 256", 256, 3}}) {
    compare<torch::optim::AdamW>(accelerator, model, width, depth, "AdamW",
                                 torch::optim::AdamWOptions(1e-3), rounds);
    compare<torch::optim::Adam>(accelerator, model, width, depth, "Adam",
                                torch::optim::AdamOptions(1e-3), rounds);
    compare<torch::optim::SGD>(accelerator, model, width, depth, "SGD momentum 0.9",
                               torch::optim::SGDOptions(1e-2).momentum(0.9), rounds);
  }
  std::printf("handing LibTorch's step counts to the kernels: at most %.1f%% of a fused step\n",
              100 * *std::max_element(handover_share.begin(), handover_share.end()));
  std::printf("\nwhole training step, AdamW, batch 64\n");
  std::printf("| model | plain LibTorch loop | accel (fused step) | accel / plain |\n");
  std::printf("|---|---|---|---|\n");
  whole_step(accelerator, "4 x 2048", 2048, 4, rounds);
  whole_step(accelerator, "3 x 256", 256, 3, rounds);
  return 0;
}
