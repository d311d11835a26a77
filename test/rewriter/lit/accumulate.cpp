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
  // A loss module is called in the step but trains nothing: not one of accumulate()'s models.
  torch::nn::MSELoss criterion;
  for (auto &batch : *loader) {
    // CHECK: {{^}}  for (auto &batch : *loader) {
    // CHECK-NEXT: {{^}}    auto step = accelerator.accumulate(model);
    optimizer.zero_grad();
    criterion(model->forward(batch[0].data), torch::zeros({4, 1})).backward();
    optimizer.step();
  }
  // An evaluation loop (no backward) gets no scope.
  for (auto &batch : *loader) {
    // CHECK: {{^}}  for (auto &batch : *loader) {
    // CHECK-NOT: {{^ *}}auto step
    auto out = model->forward(batch[0].data);
  }
  // A training step in a loop over something else: reported.
  for (int i = 0; i < 3; ++i) {
    // MSG: {{.*}}.tmp.cpp:[[@LINE-1]]:3: warning: backward() is called in a loop that does not iterate a prepared data loader{{.*}}every process trains on all of the data (take this process's share with accelerator.split_between_processes; batches drawn from environments or a random generator need each process's own: seed them with seed + accelerator.process_index()) [accel-migrate-accumulate]
    model->forward(torch::ones({2, 4})).sum().backward();
    optimizer.step();
  }
  // Batches sliced by hand from a tensor, by the loop's counter (a language model's loop): the
  // warning gives the one line that hands each process its share of the batch dimension.
  auto tokens = torch::ones({16, 100});
  const int64_t seq = 10;
  for (int64_t i = 0; i + seq < tokens.size(1); i += seq) {
    // MSG: {{.*}}.tmp.cpp:[[@LINE-1]]:3: warning: backward() is called in a loop that does not iterate a prepared data loader{{.*}}every process trains on all of the data (to give each process its share of the batch dimension, add before the loop: 'tokens = accelerator.split_between_processes(tokens);') [accel-migrate-accumulate]
    auto inputs = tokens.narrow(1, i, seq);
    model->forward(inputs.narrow(1, 0, 4)).sum().backward();
    optimizer.step();
  }
}
