// FP8 training's speed: a transformer block's MLP (Linear, GELU, Linear) forward+backward in
// bf16 autocast, and with both Linears in FP8 (tensorwise, rowwise), in the same run.
//   accel_bench_fp8_matmul [tokens in hidden reps] [--device cuda|cpu]
// Defaults on CUDA: 8192 tokens, 4096 -> 14336 -> 4096 (Llama-3-8B's MLP), 20 repetitions; on
// the CPU a small shape (the CPU's FP8 matmul is a reference, not a fast path). Prints each
// mode's median step and its speed relative to bf16's (bf16 time / mode time).

#include <accel/accel.h>
#include <torch/torch.h>

#include "bench_util.h"

#include <cstdio>
#include <string>
#include <vector>

#include <ATen/cuda/CUDAContext.h>

namespace {

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> args(argv + 1, argv + argc);
  torch::Device device(torch::kCPU);
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--device") {
      device = torch::Device(args[i + 1]);
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      break;
    }
  }
  const bool cuda = device.is_cuda();
  const int64_t tokens = args.size() > 0 ? std::stoll(args[0]) : (cuda ? 8192 : 256);
  const int64_t in = args.size() > 1 ? std::stoll(args[1]) : (cuda ? 4096 : 512);
  const int64_t hidden = args.size() > 2 ? std::stoll(args[2]) : (cuda ? 14336 : 1536);
  const int64_t reps = args.size() > 3 ? std::stoll(args[3]) : (cuda ? 20 : 5);
  if (cuda) {
    const auto* properties = at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index());
    if (properties->major * 10 + properties->minor < 89) {
      std::fprintf(stderr,
                   "accel_bench_fp8_matmul: FP8 matmuls need compute capability 8.9 or newer; %s "
                   "is %d.%d\n",
                   properties->name, properties->major, properties->minor);
      return 1;
    }
  }
  torch::manual_seed(0);
  const auto x = torch::randn({tokens, in}, torch::device(device));
  std::vector<std::string> modes = {"bf16", "tensorwise", "rowwise"};
  std::vector<std::vector<double>> times(modes.size());
  std::vector<torch::nn::Sequential> models;
  for (size_t m = 0; m < modes.size(); ++m) {
    torch::manual_seed(1);
    torch::nn::Sequential mlp(torch::nn::Linear(torch::nn::LinearOptions(in, hidden).bias(false)),
                              torch::nn::GELU(),
                              torch::nn::Linear(torch::nn::LinearOptions(hidden, in).bias(false)));
    mlp->to(device);
    if (modes[m] != "bf16") {
      accel::convert_to_fp8(*mlp, accel::Fp8Options().recipe(modes[m]).modules({"0", "2"}));
    }
    models.push_back(mlp);
  }
  auto step = [&](size_t m) {
    accel::AutocastGuard scope(device.type(), torch::kBFloat16, std::nullopt, modes[m] != "bf16");
    auto out = models[m]->forward(x);
    out.to(torch::kFloat).pow(2).mean().backward();
  };
  for (size_t m = 0; m < modes.size(); ++m) step(m);  // warm-up: kernels chosen, memory cached
  for (int64_t r = 0; r < reps; ++r) {
    for (size_t m = 0; m < modes.size(); ++m) {  // interleaved
      synchronize(device);
      times[m].push_back(accel_bench::seconds([&] {
        step(m);
        synchronize(device);
      }));
    }
  }
  const double flops = 6.0 * static_cast<double>(tokens) * static_cast<double>(in) *
                       static_cast<double>(hidden) * 2.0;
  std::printf("MLP %lld -> %lld -> %lld, %lld tokens, forward+backward on %s, median of %lld\n",
              static_cast<long long>(in), static_cast<long long>(hidden),
              static_cast<long long>(in), static_cast<long long>(tokens), device.str().c_str(),
              static_cast<long long>(reps));
  const double bf16 = accel_bench::median(times[0]);
  for (size_t m = 0; m < modes.size(); ++m) {
    const double t = accel_bench::median(times[m]);
    std::printf("%-10s %9.3f ms  %7.1f TFLOP/s  speed vs bf16 %.2fx\n", modes[m].c_str(), t * 1e3,
                flops / t / 1e12, bf16 / t);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "accel_bench_fp8_matmul: %s\n", e.what());
  return 1;
}
