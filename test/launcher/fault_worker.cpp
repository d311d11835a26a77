// A program for the fault tests, started by `accel launch` or directly:
//   fault_worker throw-on-rank-1   rank 1 throws after joining; rank 0 waits at a barrier
//   fault_worker join               joins the process group and exits 0
//   fault_worker save-state-on-main  trains; at step 2 only the main process calls save_state
//   fault_worker skip-gather-on-rank-2  three gathers; rank 2 skips the second
//   fault_worker skip-step-on-rank-1    rank 1 leaves the loop a step early and evaluates
//   fault_worker slow-main SECONDS      the main process works SECONDS before a barrier
//   fault_worker different-calls        rank 0 waits at a barrier, rank 1 gathers
//   fault_worker tp-rank-1-skips-a-forward  (under --parallelism_config_tp_size 2) three forwards
//                                       of a tensor-parallel model; rank 1 skips the second
//   fault_worker pp-stage-0-stops-sending  (under --parallelism_config_pp_size 2) pipeline steps
//                                       of a two-stage Sequential; stage 0 stops before the second

#include <accel/accel.h>

#include <chrono>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

// A few training steps of a small model through the Accelerator; `stop_before(rank, step)`
// says when a process leaves the loop, `between(step)` runs after each step.
template <typename Stop, typename Between>
void train(accel::Accelerator& accelerator, int steps, Stop stop_before, Between between) {
  torch::manual_seed(0);
  torch::nn::Linear model(8, 4);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  for (int step = 0; step < steps; ++step) {
    if (stop_before(accelerator.process_index(), step)) break;
    optimizer.zero_grad();
    auto loss = model(torch::ones({2, 8})).pow(2).mean();
    accelerator.backward(loss);
    optimizer.step();
    between(step);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  accel::Accelerator accelerator;
  if (mode == "throw-on-rank-1") {
    if (accelerator.process_index() == 1) throw std::runtime_error("injected failure on rank 1");
    accelerator.wait_for_everyone();  // never completes: rank 1 is gone
    return 0;
  }
  if (mode == "join") {
    accelerator.wait_for_everyone();
    std::cout << "joined as rank " << accelerator.process_index() << "\n";
    return 0;
  }
  if (mode == "save-state-on-main") {
    const std::string dir = argc > 2 ? argv[2] : "checkpoint";
    train(
        accelerator, 6, [](int64_t, int) { return false; },
        [&](int step) {
          if (step == 2 && accelerator.is_main_process()) accelerator.save_state(dir);
        });
    return 0;
  }
  if (mode == "skip-gather-on-rank-2") {
    for (int round = 0; round < 3; ++round) {
      if (round == 1 && accelerator.process_index() == 2) continue;
      accelerator.gather(torch::full({3}, static_cast<double>(round)));
    }
    accelerator.wait_for_everyone();
    return 0;
  }
  if (mode == "skip-step-on-rank-1") {
    train(
        accelerator, 4, [](int64_t rank, int step) { return rank == 1 && step == 3; }, [](int) {});
    accelerator.gather_for_metrics(torch::ones({2}));
    return 0;
  }
  if (mode == "different-calls") {
    if (accelerator.process_index() == 0) {
      accelerator.wait_for_everyone();
    } else {
      accelerator.gather(torch::ones({5}));
    }
    return 0;
  }
  if (mode == "tp-rank-1-skips-a-forward") {
    torch::manual_seed(0);
    torch::nn::Sequential model(torch::nn::Linear(8, 8), torch::nn::Linear(8, 4));
    accelerator.prepare(model, accel::TensorParallelPlan{{"0", "colwise"}, {"1", "rowwise"}});
    torch::NoGradGuard no_grad;
    for (int step = 0; step < 3; ++step) {
      if (step == 1 && accelerator.process_index() == 1) continue;
      model->forward(torch::ones({2, 8}));
    }
    accelerator.wait_for_everyone();
    return 0;
  }
  if (mode == "pp-stage-0-stops-sending") {
    torch::manual_seed(0);
    torch::nn::Sequential model(torch::nn::Linear(8, 8), torch::nn::Linear(8, 4));
    auto pipeline = accelerator.prepare_pipeline(model, accel::PipelineOptions().microbatches(2));
    auto mse = [](const torch::Tensor& y, const torch::Tensor& t) { return torch::mse_loss(y, t); };
    for (int step = 0; step < 3; ++step) {
      if (step == 1 && accelerator.pipeline_parallel_rank() == 0) {
        std::this_thread::sleep_for(std::chrono::seconds(120));  // never sends this step's
      }
      pipeline.step(torch::ones({4, 8}), torch::zeros({4, 4}), mse);
    }
    return 0;
  }
  if (mode == "slow-main") {
    const int seconds = argc > 2 ? std::stoi(argv[2]) : 20;
    if (accelerator.is_main_process()) std::this_thread::sleep_for(std::chrono::seconds(seconds));
    accelerator.wait_for_everyone();
    std::cout << "rank " << accelerator.process_index() << " done\n";
    return 0;
  }
  std::cerr << "usage: fault_worker throw-on-rank-1|join|save-state-on-main|skip-gather-on-rank-2|"
               "skip-step-on-rank-1|slow-main|different-calls|tp-rank-1-skips-a-forward\n";
  return 2;
}
