#pragma once

// What the sharding tests (one process and several) share: a training loop with accumulation and
// clipping, the weights it leaves, and a walk over what an AdamW optimizer holds.

#include <accel/accel.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace accel_test {

/// How a training loop clips.
enum class Clip {
  norm_when_synchronising,  // if (sync_gradients()) clip_grad_norm_: Accelerate's documented form
  norm_every_micro_step,    // clip_grad_norm_ on every micro-step, as loops without a guard do
  value_every_micro_step,   // clip_grad_value_ on every micro-step
};

/// `micro_steps` micro-steps from `first` on `batch(step)` (an {input, target} pair), the
/// Accelerator's gradient accumulation, clipping at 0.5 as `clip` says, MSE loss.
template <typename Net, typename Optimizer, typename Batch>
void train_clipped(accel::Accelerator& accelerator, Net& net, Optimizer& optimizer, int64_t first,
                   int64_t micro_steps, const Batch& batch,
                   Clip clip = Clip::norm_when_synchronising) {
  for (int64_t step = first; step < first + micro_steps; ++step) {
    auto scope = accelerator.accumulate(net);
    auto [x, y] = batch(step);
    accelerator.backward(torch::mse_loss(net->forward(x), y));
    switch (clip) {
      case Clip::norm_when_synchronising:
        if (accelerator.sync_gradients()) accelerator.clip_grad_norm_(net->parameters(), 0.5);
        break;
      case Clip::norm_every_micro_step:
        accelerator.clip_grad_norm_(net->parameters(), 0.5);
        break;
      case Clip::value_every_micro_step:
        accelerator.clip_grad_value_(net->parameters(), 0.05);
        break;
    }
    optimizer.step();
    optimizer.zero_grad();
  }
}

/// Copies of a model's parameters.
template <typename Net>
std::vector<torch::Tensor> weights(Net& net) {
  std::vector<torch::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

/// The largest elementwise difference between two lists of tensors of the same shapes.
inline double worst_difference(const std::vector<torch::Tensor>& a,
                               const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

/// Calls `visit` with each tensor an AdamW optimizer holds: its parameters (a sharded run's
/// shards), their gradients, and the two moments of each (undefined tensors included).
template <typename Optimizer, typename Visit>
void for_each_optimizer_tensor(const Optimizer& optimizer, const Visit& visit) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      visit(p);
      visit(p.grad());
    }
  }
  for (const auto& entry : optimizer.state()) {
    const auto& state = static_cast<const torch::optim::AdamWParamState&>(*entry.second);
    visit(state.exp_avg());
    visit(state.exp_avg_sq());
  }
}

}  // namespace accel_test
