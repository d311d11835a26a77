// RUN: cp %s %t.cpp
// RUN: %migrate --only=accumulate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
#include <torch/torch.h>

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto dataset = torch::data::datasets::TensorDataset({torch::ones({8, 4})});
  auto loader = torch::data::make_data_loader(std::move(dataset), 4);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (auto &batch : *loader) {
      // CHECK: {{^}}    for (auto &batch : *loader) {
      // CHECK-NEXT: {{^}}      auto step = accelerator.accumulate(model);
      optimizer.zero_grad();
      auto loss = model->forward(batch[0].data).sum();
      loss.backward();
      optimizer.step();
    }
  }
  // An evaluation loop (no backward) gets no scope.
  for (auto &batch : *loader) {
    // CHECK: {{^}}  for (auto &batch : *loader) {
    // CHECK-NOT: {{^ *}}auto step
    auto out = model->forward(batch[0].data);
  }
  // A training step in a loop over something else: reported.
  for (int i = 0; i < 3; ++i) {
    // MSG: {{.*}}.tmp.cpp:[[@LINE-1]]:3: warning: backward() is called in a loop that does not iterate a prepared data loader{{.*}}every process trains on all of the data (take this process's share with accelerator.split_between_processes) [accel-migrate-accumulate]
    model->forward(torch::ones({2, 4})).sum().backward();
    optimizer.step();
  }
}
