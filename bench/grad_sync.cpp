// Two processes (run under `accel launch --num_processes 2`). Over the same Gloo process group:
//  1. the headline: the bandwidth of the prepared model's whole gradient sync inside backward --
//     gradient bytes over the time sync adds to a backward pass, so including the copies into the
//     buckets -- against one raw all-reduce of a flat buffer of the same bytes (target >= 0.9);
//     then the same with gradient_as_bucket_view(false), which also copies back out of them;
//  2. step time of the prepared model (bucketed all-reduce launched from autograd hooks,
//     overlapping backward) against a naive loop that all-reduces each gradient after backward;
//  3. raw c10d only: the bucketed all-reduce -- the same bytes in the reducer's buckets (1 MiB
//     first, then up to bucket_cap_mb), each bucket's all-reduce started as soon as the previous
//     one is issued -- against the flat all-reduce.
// Prints medians over interleaved repetitions, and the minor page faults per step of the two steps
// the headline subtracts: a step that faults its gradients' memory in afresh (an allocator that
// gave it back to the system) is slower for reasons that are not gradient sync.
//   Run: build/launcher/accel launch --num_processes 2 build/bench/accel_bench_grad_sync [reps]

#include "bench_util.h"
#include "distributed/collectives.h"
#include "distributed/distributed_state.h"
#include "distributed/gradient_sync.h"
#include "grad_sync_model.h"

#include <accel/accel.h>

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 9;
  const int width = 1024, layers = 8, steps = 3;
  torch::set_num_threads(1);
  accel::Accelerator accelerator;
  if (accelerator.num_processes() != 2) {
    std::fprintf(stderr, "run with: accel launch --num_processes 2 %s\n", argv[0]);
    return 2;
  }
  auto& group = *accel::distributed::DistributedState::existing()->device_group();
  const auto x = torch::randn({32, width});

  auto prepared = accel_bench::grad_sync_model(width, layers);
  accelerator.prepare(prepared);
  // The same model with gradients copied into the buckets and back (PyTorch DDP's default).
  accel::Accelerator copying(accel::AcceleratorOptions().ddp(
      accel::DistributedDataParallelOptions().gradient_as_bucket_view(false)));
  auto prepared_copying = accel_bench::grad_sync_model(width, layers);
  copying.prepare(prepared_copying);
  auto naive = accel_bench::grad_sync_model(width, layers);

  int64_t bytes = 0;
  for (const auto& p : prepared->parameters()) bytes += p.numel() * p.element_size();
  auto flat = torch::ones({bytes / 4});
  // The reducer's bucket layout: parameters in reverse registration order, 1 MiB first bucket,
  // 25 MiB after that.
  std::vector<torch::Tensor> buckets;
  {
    int64_t cap = accel::distributed::kFirstBucketBytes, filled = 0;
    auto params = prepared->parameters();
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      filled += it->numel() * it->element_size();
      if (filled >= cap) {
        buckets.push_back(torch::ones({filled / 4}));
        filled = 0;
        cap = accelerator.options().ddp.bucket_cap_mb() << 20;
      }
    }
    if (filled > 0) buckets.push_back(torch::ones({filled / 4}));
  }
  auto bucketed_allreduce = [&] {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (auto& bucket : buckets) {
      std::vector<torch::Tensor> one{bucket};
      works.push_back(group.allreduce(one));
    }
    for (auto& work : works) work->wait();
  };

  auto prepared_step = [&] {
    prepared->zero_grad();
    accelerator.backward(prepared->forward(x).sum());
  };
  auto copying_step = [&] {
    prepared_copying->zero_grad();
    copying.backward(prepared_copying->forward(x).sum());
  };
  auto unsynced_step = [&] {
    auto guard = accelerator.no_sync(prepared);
    prepared->zero_grad();
    accelerator.backward(prepared->forward(x).sum());
  };
  auto naive_step = [&] {
    naive->zero_grad();
    naive->forward(x).sum().backward();
    for (auto& p : naive->parameters()) {
      auto grad = p.grad();
      accel::distributed::all_reduce(group, grad, accel::Reduction::Mean);
    }
  };
  auto flat_allreduce = [&] { accel::distributed::all_reduce(group, flat, accel::Reduction::Sum); };
  auto minor_faults = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_minflt);
  };
  auto timed = [&](auto&& fn, std::vector<double>* faults_per_step = nullptr) {
    accelerator.wait_for_everyone();
    const double faults = minor_faults();
    const double seconds = accel_bench::seconds([&] {
      for (int s = 0; s < steps; ++s) fn();
    });
    if (faults_per_step) faults_per_step->push_back((minor_faults() - faults) / steps);
    return seconds / steps;
  };

  for (int i = 0; i < 2; ++i) {  // warm-up (and the reducer's bucket rebuild)
    prepared_step();
    copying_step();
    naive_step();
    unsynced_step();
    flat_allreduce();
    bucketed_allreduce();
  }
  std::vector<double> bucket_ratio, step_ratio, bandwidth_ratio, copying_ratio, t_prepared, t_naive,
      t_flat, t_unsynced, faults_prepared, faults_unsynced;
  for (int r = 0; r < repetitions; ++r) {
    const double p = timed(prepared_step, &faults_prepared);
    const double c = timed(copying_step);
    const double n = timed(naive_step);
    const double u = timed(unsynced_step, &faults_unsynced);
    const double f = timed(flat_allreduce);
    const double b = timed(bucketed_allreduce);
    bucket_ratio.push_back(f / b);
    t_prepared.push_back(p);
    t_naive.push_back(n);
    t_unsynced.push_back(u);
    t_flat.push_back(f);
    step_ratio.push_back(p / n);
    // bandwidth(sync) / bandwidth(flat) = (bytes / (p - u)) / (bytes / f) = f / (p - u)
    bandwidth_ratio.push_back(f / std::max(p - u, 1e-9));
    copying_ratio.push_back(f / std::max(c - u, 1e-9));
  }
  if (accelerator.is_main_process()) {
    const double mb = bytes / 1e6;
    std::printf("grad_sync: %d processes, %.1f MB of gradients (%d x Linear(%d, %d))\n",
                static_cast<int>(accelerator.num_processes()), mb, layers, width, width);
    std::printf("  step: prepared %.1f ms, naive per-tensor all-reduce %.1f ms, no sync %.1f ms\n",
                accel_bench::median(t_prepared) * 1e3, accel_bench::median(t_naive) * 1e3,
                accel_bench::median(t_unsynced) * 1e3);
    std::printf("  minor page faults per step: prepared %.0f, no sync %.0f\n",
                accel_bench::median(faults_prepared), accel_bench::median(faults_unsynced));
    std::printf("  raw flat all-reduce of the same bytes: %.1f ms (%.2f GB/s)\n",
                accel_bench::median(t_flat) * 1e3, bytes / accel_bench::median(t_flat) / 1e9);
    // The headline measures accel: the time its reducer adds to backward (bucket copies and the
    // all-reduces it starts from autograd hooks, less what overlaps the backward itself) against
    // one raw all-reduce of the same bytes.
    std::printf(
        "gradient sync vs a flat all-reduce of the same bytes, inside backward (flat / "
        "(prepared - no sync), median): %.3f  [target >= 0.9]\n",
        accel_bench::median(bandwidth_ratio));
    std::printf(
        "  the same with gradient_as_bucket_view(false) (copies into and out of the buckets): "
        "%.3f\n",
        accel_bench::median(copying_ratio));
    std::printf("  step time ratio (prepared / naive per-tensor all-reduce, median): %.3f\n",
                accel_bench::median(step_ratio));
    // Not accel's code: the floor the bucket layout itself sets (raw c10d on both sides).
    std::printf("  raw bucketed all-reduce (%zu buckets) / one flat all-reduce, median: %.3f\n",
                buckets.size(), accel_bench::median(bucket_ratio));
  }
  return 0;
}
