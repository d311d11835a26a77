// Activation memory of one forward+backward of a deep residual MLP with dropout, in one mode:
//   accel_bench_activation_memory MODE [width depth batch]
// MODE: plain, checkpoint (every block), every2 (every 2nd block), op (every block, its matmuls'
// outputs kept), offload (every block, its kept input in host memory: the same as checkpoint on
// the CPU). Prints one line: the counted
// peak (bytes LibTorch's allocator held at most above what was live before, CountingCpuAllocator)
// and the peak resident growth (VmHWM after clearing it, minus VmRSS before), and the step time.
// activation_memory.py runs each mode in a fresh process, and PyTorch's torch.utils.checkpoint
// (non-reentrant) on the same model in the same run, and prints the table.

#include <accel/accel.h>
#include <torch/torch.h>

#include "util/counting_allocator.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

namespace {

struct DropBlockImpl : torch::nn::Module {
  explicit DropBlockImpl(int64_t width)
      : up(register_module("up", torch::nn::Linear(width, 2 * width))),
        down(register_module("down", torch::nn::Linear(2 * width, width))),
        dropout(register_module("dropout", torch::nn::Dropout(0.1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + down(dropout(torch::gelu(up(x)))); }
  torch::nn::Linear up;
  torch::nn::Linear down;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(DropBlock);

/// A field of /proc/self/status, in KiB.
int64_t status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  throw std::runtime_error("no " + field + " in /proc/self/status");
}

void reset_peak_resident() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace

int main(int argc, char** argv) try {
  const std::string mode = argc > 1 ? argv[1] : "checkpoint";
  const int64_t width = argc > 2 ? std::stoll(argv[2]) : 1024;
  const int64_t depth = argc > 3 ? std::stoll(argv[3]) : 24;
  const int64_t batch = argc > 4 ? std::stoll(argv[4]) : 512;
  torch::manual_seed(0);
  torch::nn::Sequential model;
  for (int64_t i = 0; i < depth; ++i) model->push_back(DropBlock(width));
  const auto x = torch::randn({batch, width});
  int64_t every = 0;
  if (mode == "checkpoint" || mode == "offload" || mode == "op") every = 1;
  const auto options =
      accel::CheckpointOptions().save_matmuls(mode == "op").offload(mode == "offload");
  if (mode == "every2") every = 2;
  if (mode != "plain" && every == 0) throw std::invalid_argument("unknown mode " + mode);
  // The gradients' memory is there before the measured step, as in a training loop's second step.
  for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);

  accel::util::CountingCpuAllocator counter;
  const int64_t live_before = counter.live_bytes();
  reset_peak_resident();
  const int64_t resident_before = status_kib("VmRSS");
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor h = x;
  int64_t index = 0;
  for (const auto& module : *model) {
    auto block = module.ptr<DropBlockImpl>();
    if (every > 0 && index % every == 0) {
      h = accel::checkpoint(
          options, [block](const torch::Tensor& in) { return block->forward(in); }, h);
    } else {
      h = block->forward(h);
    }
    ++index;
  }
  h.pow(2).mean().backward();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t resident_growth = status_kib("VmHWM") - resident_before;
  std::printf("accel %s counted_peak_mib %.1f resident_growth_mib %.1f seconds %.3f\n",
              mode.c_str(), (counter.peak_bytes() - live_before) / 1048576.0,
              resident_growth / 1024.0, seconds);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "accel_bench_activation_memory: %s\n", e.what());
  return 1;
}
