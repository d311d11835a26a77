// The flight recorder's cost per training step (docs/self-healing.md): two processes train
// accel_bench_grad_sync's model (8 x 1024 linear layers, batch 32), and the same run times
//  1. the prepared model's step (forward, backward with its bucketed gradient sync), as
//     accel_bench_grad_sync's does, counting the collectives one step enters;
//  2. what the recorder adds to one collective: a collective through a recording backend against
//     the same collective through the backend it wraps, where that backend completes at once
//     (so only the recorder's own work is timed: naming the call, describing the tensors,
//     recording the entry, and the completion callback).
// The recorder's share of a step is (2) times the step's collectives over (1); the target is
// at most 1%.
//   Run: build/launcher/accel launch --num_processes 2 build/bench/accel_bench_flight_recorder

#include "distributed/flight_recorder.h"
#include "bench_util.h"
#include "grad_sync_model.h"

#include <accel/accel.h>

#include <cstdio>
#include <cstdlib>

namespace {

// A collective that is done as soon as it is issued, with a completed future as Gloo's has.
class DoneWork : public c10d::Work {
 public:
  DoneWork() : future_(c10::make_intrusive<c10::ivalue::Future>(c10::NoneType::get())) {
    future_->markCompleted(c10::IValue());
  }
  bool wait(std::chrono::milliseconds) override { return true; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class InstantBackend : public c10d::Backend {
 public:
  InstantBackend() : Backend(0, 1) {}
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&,
                                           const c10d::AllreduceOptions&) override {
    return c10::make_intrusive<DoneWork>();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 9;
  const int width = 1024, layers = 8, steps = 3, calls = 2000;
  torch::set_num_threads(1);
  accel::Accelerator accelerator;
  if (accelerator.num_processes() != 2) {
    std::fprintf(stderr, "run with: accel launch --num_processes 2 %s\n", argv[0]);
    return 2;
  }
  const auto x = torch::randn({32, width});
  auto model = accel_bench::grad_sync_model(width, layers);
  accelerator.prepare(model);
  auto step = [&] {
    model->zero_grad();
    accelerator.backward(model->forward(x).sum());
  };

  auto plain = c10::make_intrusive<InstantBackend>();
  auto recorded = accel::distributed::record_collectives(plain, "bench");
  if (recorded.get() == plain.get()) {
    std::fprintf(stderr, "the flight recorder is off (ACCEL_FLIGHT_RECORDER=0?)\n");
    return 2;
  }
  std::vector<at::Tensor> bucket{torch::ones({1024})};
  auto issue = [&](c10d::Backend& backend) {
    for (int i = 0; i < calls; ++i) backend.allreduce(bucket)->wait();
  };

  for (int i = 0; i < 2; ++i) step();  // warm-up, and the reducer's bucket rebuild
  // Collectives per step, from the recorder's own record of the job's backends.
  auto count_entries = [] {
    const std::string text = accel::distributed::flight_record_text();
    size_t n = 0;
    for (size_t at = text.find("\nentry\t"); at != std::string::npos;
         at = text.find("\nentry\t", at + 1))
      ++n;
    return n;
  };
  std::vector<double> t_step, t_recorded, t_plain;
  size_t per_step = 0;
  for (int r = 0; r < repetitions; ++r) {
    accelerator.wait_for_everyone();
    // The record keeps the last 64 entries: count one step's on its own.
    const size_t before = count_entries();
    step();
    const size_t after = count_entries();
    if (after > before) per_step = std::max(per_step, after - before);
    accelerator.wait_for_everyone();
    t_step.push_back(accel_bench::seconds([&] {
                       for (int s = 0; s < steps; ++s) step();
                     }) /
                     steps);
    t_plain.push_back(accel_bench::seconds([&] { issue(*plain); }) / calls);
    t_recorded.push_back(accel_bench::seconds([&] { issue(*recorded); }) / calls);
  }
  const double step_s = accel_bench::median(t_step);
  std::vector<double> added;
  for (int r = 0; r < repetitions; ++r) added.push_back(t_recorded[r] - t_plain[r]);
  const double per_collective = accel_bench::median(added);
  if (accelerator.is_main_process()) {
    std::printf("flight recorder, 2 processes, %d x %d model, median of %d rounds\n", layers, width,
                repetitions);
    std::printf("  prepared step (forward, backward, gradient sync): %.3f ms\n", step_s * 1e3);
    std::printf("  collectives per step: %zu\n", per_step);
    std::printf("  a collective through the backend alone: %.2f us, recorded: %.2f us\n",
                accel_bench::median(t_plain) * 1e6, accel_bench::median(t_recorded) * 1e6);
    std::printf("  recorder per step: %.2f us = %.4f%% of the step (target <= 1%%)\n",
                per_collective * per_step * 1e6, 100.0 * per_collective * per_step / step_s);
  }
  return 0;
}
