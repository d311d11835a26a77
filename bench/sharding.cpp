// Sharded data parallel against plain data parallel, on 2 processes: step time of each strategy
// relative to NO_SHARD, and the bytes each process holds for weights, gradients and Adam state
// after a step. The model is an MLP of 6 layers of 4096 (100.7M parameters), trained with AdamW
// on batches of 16 per process; FULL_SHARD's units are its Linear layers. SHARD_GRAD_OP and
// FULL_SHARD also run with CPU offload (fsdp_offload_params): on this CPU-only build the "device"
// is the host too, so their rows show what the extra copies and the separate host shards cost,
// not a PCIe link. The strategies are built side by side and step in turn, round after round, so
// they see the same machine; figures are medians.
//   accel launch --num_processes 2 build/bench/accel_bench_sharding [ROUNDS]

#include <accel/accel.h>
#include <torch/torch.h>

#include "bench_util.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int64_t kWidth = 4096, kDepth = 6, kBatch = 16;

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
  std::unique_ptr<accel::Accelerator> accelerator;
  torch::nn::Sequential model;
  std::unique_ptr<accel::AcceleratedOptimizer<torch::optim::AdamW>> optimizer;
  std::vector<double> step_seconds;

  Run(std::string name, bool offload_to_host)
      : strategy(std::move(name)), offload(offload_to_host) {
    accelerator = std::make_unique<accel::Accelerator>(
        accel::AcceleratorOptions()
            .cpu(true)
            .sharding_strategy(strategy)
            .fsdp_offload_params(offload)
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
    auto x = torch::randn({kBatch, kWidth}, generator);
    accelerator->backward(model->forward(x).pow(2).mean());
    optimizer->step();
    optimizer->zero_grad();
  }

  /// Distinct storages behind the parameters, gradients and Adam state, after a step (before
  /// zero_grad); views of one buffer count once.
  int64_t held_bytes() {
    auto x = torch::randn({kBatch, kWidth});
    accelerator->backward(model->forward(x).pow(2).mean());
    optimizer->step();
    std::map<const void*, int64_t> storages;
    auto count = [&](const torch::Tensor& t) {
      // FULL_SHARD's parameters have no storage data of their own (their shards are counted).
      if (t.defined() && t.storage().data() != nullptr) {
        storages[t.storage().data()] = t.storage().nbytes();
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
    int64_t bytes = 0;
    for (const auto& entry : storages) bytes += entry.second;
    return bytes;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  std::vector<std::unique_ptr<Run>> runs;
  for (const char* strategy :
       {"NO_SHARD", "SHARD_OPTIMIZER_STATE", "SHARD_GRAD_OP", "FULL_SHARD"}) {
    runs.push_back(std::make_unique<Run>(strategy, false));
  }
  for (const char* strategy : {"SHARD_GRAD_OP", "FULL_SHARD"}) {
    runs.push_back(std::make_unique<Run>(strategy, true));
  }
  auto& main_accelerator = *runs.front()->accelerator;
  for (int round = 0; round < rounds + 1; ++round) {  // the first round warms up
    for (auto& run : runs) {
      run->accelerator->wait_for_everyone();
      const double seconds = accel_bench::seconds([&] { run->step(round); });
      if (round > 0) run->step_seconds.push_back(seconds);
    }
  }
  std::vector<int64_t> held;
  for (auto& run : runs) held.push_back(run->held_bytes());
  if (!main_accelerator.is_main_process()) return 0;
  std::printf("%lld processes, %lld parameters, median of %d rounds, %d thread(s) per process\n",
              static_cast<long long>(main_accelerator.num_processes()),
              static_cast<long long>(kWidth * kWidth * kDepth + kWidth * kDepth), rounds,
              torch::get_num_threads());
  std::printf("| strategy | step | step / NO_SHARD | held per process | held / NO_SHARD |\n");
  std::printf("|---|---|---|---|---|\n");
  const double base_step = accel_bench::median(runs.front()->step_seconds);
  for (size_t i = 0; i < runs.size(); ++i) {
    const double step = accel_bench::median(runs[i]->step_seconds);
    std::printf("| %s%s | %.3f s | %.2f | %.0f MiB | %.2f |\n", runs[i]->strategy.c_str(),
                runs[i]->offload ? ", CPU offload" : "", step, step / base_step,
                held[i] / 1048576.0,
                static_cast<double>(held[i]) / static_cast<double>(held.front()));
  }
  return 0;
}
