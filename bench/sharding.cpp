// Sharded data parallel against plain data parallel, on 2 processes: step time of each strategy
// relative to NO_SHARD, and the bytes each process holds for weights, gradients and Adam state
// after a step. The model is an MLP of 6 layers of 4096 (100.7M parameters), trained with AdamW
// on batches of 16 per process; FULL_SHARD's units are its Linear layers. SHARD_GRAD_OP and
// FULL_SHARD also run with CPU offload (fsdp_offload_params): on this CPU-only build the "device"
// is the host too, so their rows show what the extra copies and the separate host shards cost,
// not a PCIe link. The strategies are built side by side and step in turn, round after round, so
// they see the same machine; figures are medians.
//   accel launch --num_processes 2 build/bench/accel_bench_sharding [ROUNDS]
// With --device cuda each process trains on its GPU, and the table also gives what each strategy
// holds on the device and the most its step allocated there beyond that. On one process every
// strategy but the offloading ones runs as NO_SHARD (there is nothing to shard across); FULL_SHARD
// with CPU offload keeps weights, gradients and Adam state on the host and gathers each unit onto
// the device for its operators:
//   build/bench/accel_bench_sharding 5 --device cuda
// Host memory is counted by the allocator (every CPU tensor's bytes): each step's peak beyond what
// the process held before it. FULL_SHARD's rows also give the most bytes of gathered units alive
// at once, against its bound of two units (the one running and the next) and one shard, and the
// time each step's operators waited for gathers (the communication not hidden), with and without
// prefetch.

#include <accel/accel.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include "bench_util.h"
#include "sharding/optimizer_shards.h"
#include "util/counting_allocator.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int64_t kWidth = 4096, kDepth = 6, kBatch = 16;
bool on_gpu = false;  // --device cuda
accel::util::CountingCpuAllocator* host_counter = nullptr;

/// Bytes the caching allocator has handed out on this process's GPU: now, and at most since the
/// last reset.
int64_t device_allocated(bool peak = false) {
  torch::cuda::synchronize();
  const auto index = c10::cuda::current_device();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  return peak ? stats.allocated_bytes[0].peak : stats.allocated_bytes[0].current;
}

torch::nn::Sequential build_model() {
  torch::manual_seed(0);
  torch::nn::Sequential model;
  for (int64_t i = 0; i < kDepth; ++i) {
    model->push_back(torch::nn::Linear(kWidth, kWidth));
    model->push_back(torch::nn::Tanh());
  }
  return model;
}

/// One strategy's job: its own Accelerator, model and optimizer.
struct Run {
  std::string strategy;
  bool offload;
  bool prefetch;  // FULL_SHARD: forward prefetch and BACKWARD_PRE
  std::unique_ptr<accel::Accelerator> accelerator;
  torch::nn::Sequential model;
  std::unique_ptr<accel::AcceleratedOptimizer<torch::optim::AdamW>> optimizer;
  std::vector<double> step_seconds;
  // On the GPU: the most that forward, and backward with the optimizer step, allocated beyond what
  // was held before the step, after the first round.
  int64_t forward_peak_bytes = 0, backward_peak_bytes = 0;
  // Host bytes, counted: the most a step allocated beyond what was held before it; FULL_SHARD's
  // gathered units alive at once, at most, and its bound (two units and one shard).
  int64_t host_step_peak_bytes = 0, peak_gathered_bytes = 0, gathered_bound_bytes = 0;
  // FULL_SHARD: seconds each step's operators waited for gathers (exposed communication).
  std::vector<double> wait_seconds;

  Run(std::string name, bool offload_to_host, bool prefetch_units = false)
      : strategy(std::move(name)), offload(offload_to_host), prefetch(prefetch_units) {
    accelerator = std::make_unique<accel::Accelerator>(
        accel::AcceleratorOptions()
            .cpu(!on_gpu)
            .sharding_strategy(strategy)
            .fsdp_offload_params(offload)
            .fsdp_forward_prefetch(prefetch)
            .fsdp_backward_prefetch(prefetch ? "BACKWARD_PRE" : "NO_PREFETCH")
            .fsdp_transformer_layer_cls_to_wrap(strategy == "FULL_SHARD"
                                                    ? std::vector<std::string>{"Linear"}
                                                    : std::vector<std::string>{}));
    model = build_model();
    accelerator->prepare(model);
    optimizer = std::make_unique<accel::AcceleratedOptimizer<torch::optim::AdamW>>(
        accelerator->prepare(torch::optim::AdamW(model->parameters(), {})));
  }

  void step(int64_t round) {
    auto generator =
        at::make_generator<at::CPUGeneratorImpl>(round * 1000 + accelerator->process_index());
    auto x = torch::randn({kBatch, kWidth}, generator).to(accelerator->device());
    const int64_t before = on_gpu ? device_allocated() : 0;
    // The first round makes Adam's state and the send buffers, which later rounds hold.
    auto peak_since = [&](int64_t& most) {
      if (!on_gpu || round == 0) return;
      most = std::max(most, device_allocated(/*peak=*/true) - before);
      c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
    };
    if (on_gpu) c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
    auto* shards = accel::sharding::shards_of(*optimizer).get();
    if (shards != nullptr) shards->reset_gather_peak();
    host_counter->reset_peak();
    const int64_t host_before = host_counter->live_bytes();
    const double waited_before =
        shards != nullptr ? shards->gather_statistics().gather_wait_seconds : 0.0;
    auto loss = model->forward(x).pow(2).mean();
    peak_since(forward_peak_bytes);
    accelerator->backward(loss);
    optimizer->step();
    optimizer->zero_grad();
    peak_since(backward_peak_bytes);
    if (round == 0) return;
    host_step_peak_bytes = std::max(host_step_peak_bytes, host_counter->peak_bytes() - host_before);
    if (shards != nullptr && shards->shards_parameters()) {
      const auto gathered = shards->gather_statistics();
      wait_seconds.push_back(gathered.gather_wait_seconds - waited_before);
      peak_gathered_bytes = std::max(peak_gathered_bytes, gathered.peak_bytes);
      gathered_bound_bytes = 2 * gathered.largest_unit_bytes + gathered.largest_shard_bytes;
    }
  }

  /// Distinct storages behind the parameters, gradients and Adam state, after a step (before
  /// zero_grad), wherever they are and on the GPU; views of one buffer count once.
  std::pair<int64_t, int64_t> held_bytes() {
    auto x = torch::randn({kBatch, kWidth}).to(accelerator->device());
    accelerator->backward(model->forward(x).pow(2).mean());
    optimizer->step();
    std::map<const void*, std::pair<int64_t, bool>> storages;  // bytes, on the GPU
    auto count = [&](const torch::Tensor& t) {
      // FULL_SHARD's parameters have no storage data of their own (their shards are counted).
      if (t.defined() && t.storage().data() != nullptr) {
        storages[t.storage().data()] = {t.storage().nbytes(), t.is_cuda()};
      }
    };
    for (const auto& p : model->parameters()) {
      count(p);
      count(p.grad());
    }
    for (const auto& group : optimizer->param_groups()) {
      for (const auto& p : group.params()) {
        count(p);
        count(p.grad());
      }
    }
    for (const auto& entry : optimizer->state()) {
      const auto& state = static_cast<const torch::optim::AdamWParamState&>(*entry.second);
      count(state.exp_avg());
      count(state.exp_avg_sq());
    }
    optimizer->zero_grad();
    int64_t bytes = 0, on_device = 0;
    for (const auto& [data, storage] : storages) {
      bytes += storage.first;
      if (storage.second) on_device += storage.first;
    }
    return {bytes, on_device};
  }
};

}  // namespace

int main(int argc, char** argv) {
  accel::util::CountingCpuAllocator counter;
  host_counter = &counter;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device" && i + 1 < argc) {
      on_gpu = torch::Device(argv[++i]).is_cuda();
    } else {
      rounds = std::atoi(argv[i]);
    }
  }
  std::vector<std::unique_ptr<Run>> runs;
  for (const char* strategy :
       {"NO_SHARD", "SHARD_OPTIMIZER_STATE", "SHARD_GRAD_OP", "FULL_SHARD"}) {
    runs.push_back(std::make_unique<Run>(strategy, false));
  }
  runs.push_back(std::make_unique<Run>("FULL_SHARD", false, /*prefetch=*/true));
  for (const char* strategy : {"SHARD_GRAD_OP", "FULL_SHARD"}) {
    runs.push_back(std::make_unique<Run>(strategy, true));
  }
  auto& main_accelerator = *runs.front()->accelerator;
  for (int round = 0; round < rounds + 1; ++round) {  // the first round warms up
    for (auto& run : runs) {
      run->accelerator->wait_for_everyone();
      const double seconds = accel_bench::seconds([&] {
        run->step(round);
        if (on_gpu) torch::cuda::synchronize();
      });
      if (round > 0) run->step_seconds.push_back(seconds);
    }
  }
  std::vector<std::pair<int64_t, int64_t>> held;
  for (auto& run : runs) held.push_back(run->held_bytes());
  if (!main_accelerator.is_main_process()) return 0;
  std::printf(
      "%lld processes on %s, %lld parameters, median of %d rounds, %d thread(s) per "
      "process\n",
      static_cast<long long>(main_accelerator.num_processes()),
      main_accelerator.device().str().c_str(),
      static_cast<long long>(kWidth * kWidth * kDepth + kWidth * kDepth), rounds,
      torch::get_num_threads());
  std::printf(
      "| strategy | step | step / NO_SHARD | held per process | held / NO_SHARD | host step's "
      "peak beyond held | peak gathered (bound) | waiting for gathers |%s\n",
      on_gpu ? " held on the GPU | forward's peak beyond it | backward and step's |" : "");
  std::printf("|---|---|---|---|---|---|---|---|%s\n", on_gpu ? "---|---|---|" : "");
  const double base_step = accel_bench::median(runs.front()->step_seconds);
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& run = *runs[i];
    const double step = accel_bench::median(run.step_seconds);
    std::printf("| %s%s%s | %.3f s | %.2f | %.0f MiB | %.2f |", run.strategy.c_str(),
                run.offload ? ", CPU offload" : "", run.prefetch ? ", prefetch" : "", step,
                step / base_step, held[i].first / 1048576.0,
                static_cast<double>(held[i].first) / static_cast<double>(held.front().first));
    std::printf(" %.0f MiB |", run.host_step_peak_bytes / 1048576.0);
    if (run.gathered_bound_bytes > 0) {
      std::printf(" %.0f MiB (%.0f MiB) |", run.peak_gathered_bytes / 1048576.0,
                  run.gathered_bound_bytes / 1048576.0);
      std::printf(" %.3f s |", accel_bench::median(run.wait_seconds));
    } else {
      std::printf(" - | - |");
    }
    if (on_gpu) {
      std::printf(" %.0f MiB | %.0f MiB | %.0f MiB |", held[i].second / 1048576.0,
                  run.forward_peak_bytes / 1048576.0, run.backward_peak_bytes / 1048576.0);
    }
    std::printf("\n");
  }
  return 0;
}
