#pragma once

// The run whose checkpoint fixtures/before_issue_73/ holds: written by libaccel at fb57ca5,
// before the training loop's state was split among its owners (issue 73), by exactly this code
// (a main calling `format_fixture::run("", folder)`, linked with that commit's libaccel), and
// loaded by SaveState.AFolderWrittenBeforeTheTrainingLoopSplitLoads. Changing the run means
// writing the folder again with that older libaccel.

#include <accel/accel.h>

#include <torch/torch.h>

#include <string>

namespace format_fixture {

/// Twelve examples: x = (i, i/2, 1, -i) / 10, y = (sum of x, i mod 3).
class Data : public torch::data::datasets::Dataset<Data> {
 public:
  torch::data::Example<> get(size_t index) override {
    const auto i = static_cast<float>(index);
    auto x = torch::tensor({i, i / 2, 1.0f, -i}) / 10;
    return {x, torch::stack({x.sum(), torch::tensor(static_cast<float>(index % 3))})};
  }
  torch::optional<size_t> size() const override { return 12; }
};

/// One process, accumulation over 2 micro-steps, a seeded shuffle, AdamW with a StepLR, the
/// gradients clipped every micro-step. Runs the epoch's 4 micro-steps after loading `load_from`
/// (when given; the loader resumes where it was), saving into `save_to` from inside
/// accumulate() after micro-step 3 (inside a window: its gradients are saved) when given.
/// Returns the weights at the end (or at the save), the Accelerator's step count, the micro-steps
/// this call ran, and whether the micro-step a load resumed synchronises.
struct Result {
  torch::Tensor weight, bias;
  int64_t step = 0;
  int64_t micro_steps_run = 0;
  bool sync_gradients_after_load = true;
};

inline Result run(const std::string& load_from, const std::string& save_to) {
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).gradient_accumulation_steps(2).seed(11));
  torch::manual_seed(7);
  torch::nn::Linear model(4, 2);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), 0.05));
  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, 2, 0.5));
  auto loader = accelerator.prepare_data_loader(Data().map(torch::data::transforms::Stack<>()), 3);
  Result result;
  if (!load_from.empty()) {
    accelerator.load_state(load_from);
    result.sync_gradients_after_load = accelerator.sync_gradients();
  }
  for (auto& batch : *loader) {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
    accelerator.clip_grad_norm_(model->parameters(), 0.5);
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
    ++result.micro_steps_run;
    if (!save_to.empty() && accelerator.step() == 3) {
      accelerator.save_state(save_to);
      break;
    }
  }
  result.weight = model->weight.detach().clone();
  result.bias = model->bias.detach().clone();
  result.step = accelerator.step();
  return result;
}

}  // namespace format_fixture
