// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp
// RUN: FileCheck %s --input-file=%t.cpp
// The result compiles (a second run parses it) and has nothing left to migrate.
// RUN: %migrate --check %t.cpp
//
// A scheduler stepped once an epoch, outside the batch loop, is prepared per_epoch: it steps once
// per call on any process count. One stepped in the batch loop keeps Accelerate's rule (with the
// optimizer, once per process).
#include <torch/torch.h>

struct Points : torch::data::datasets::Dataset<Points> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({2}, static_cast<double>(i)), torch::ones({1})};
  }
  torch::optional<size_t> size() const override { return 16; }
};

template <typename Loader>
void train_epoch(torch::nn::Linear &model, torch::optim::Optimizer &optimizer, Loader &loader) {
  for (auto &batch : loader) {
    optimizer.zero_grad();
    torch::mse_loss(model->forward(batch.data), batch.target).backward();
    optimizer.step();
  }
}

int main() {
  torch::nn::Linear model(2, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  torch::optim::StepLR per_epoch(optimizer, 1, 0.5);
  // CHECK: {{^}}  auto per_epoch = accelerator.prepare(torch::optim::StepLR(optimizer, 1, 0.5), accel::SchedulerStepping::per_epoch);
  torch::optim::StepLR per_batch(optimizer, 100, 0.9);
  // CHECK: {{^}}  auto per_batch = accelerator.prepare(torch::optim::StepLR(optimizer, 100, 0.9));
  auto every_other = torch::optim::StepLR(optimizer, 2, 0.5);
  // CHECK: {{^}}  auto every_other = accelerator.prepare(torch::optim::StepLR(optimizer, 2, 0.5), accel::SchedulerStepping::per_epoch);
  torch::optim::StepLR after_helper(optimizer, 1, 0.9);
  // CHECK: {{^}}  auto after_helper = accelerator.prepare(torch::optim::StepLR(optimizer, 1, 0.9), accel::SchedulerStepping::per_epoch);
  torch::optim::StepLR never_stepped(optimizer, 1, 0.9);
  // CHECK: {{^}}  auto never_stepped = accelerator.prepare(torch::optim::StepLR(optimizer, 1, 0.9));
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 4);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto &batch : *loader) {
      optimizer.zero_grad();
      torch::mse_loss(model->forward(batch.data), batch.target).backward();
      optimizer.step();
      per_batch.step();
    }
    per_epoch.step();
    if (epoch % 2 == 1)
      every_other.step();
    train_epoch(model, optimizer, *loader);
    after_helper.step();
  }
  // Batches sliced by hand: a loop whose own body runs backward() is the batch loop.
  auto x = torch::rand({8, 2});
  torch::optim::StepLR hand_batches(optimizer, 100, 0.9);
  // CHECK: {{^}}  auto hand_batches = accelerator.prepare(torch::optim::StepLR(optimizer, 100, 0.9));
  for (int i = 0; i < 8; i += 4) {
    optimizer.zero_grad();
    model->forward(x.slice(0, i, i + 4)).sum().backward();
    optimizer.step();
    hand_batches.step();
  }
}
