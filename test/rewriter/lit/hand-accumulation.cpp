// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// The result compiles (a second run parses it) and has nothing left to migrate.
// RUN: %migrate --check %t.cpp
//
// Loops that accumulate gradients by hand keep their own count: accumulate_until(<this batch
// steps>, model) opens each micro-step, so the gradients are averaged across processes only on
// the batches that step, and the loss is divided (or not) as the program divides it.
#include <torch/torch.h>

struct Points : torch::data::datasets::Dataset<Points> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({2}, static_cast<double>(i)), torch::ones({1})};
  }
  torch::optional<size_t> size() const override { return 16; }
};

int main() {
  torch::nn::Linear model(2, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 2);
  const int accumulation = 4;
  size_t i = 0;
  for (auto &batch : *loader) {
    auto loss = torch::mse_loss(model->forward(batch.data), batch.target) / accumulation;
    loss.backward();
    if ((i + 1) % accumulation == 0) {
      optimizer.step();
      optimizer.zero_grad();
    }
    ++i;
  }
  // CHECK: for (auto &batch : *loader) {
  // CHECK-NEXT: {{^ *}}auto step = accelerator.accumulate_until((i + 1) % accumulation == 0, model);
  // CHECK-NEXT: {{^ *}}auto loss = torch::mse_loss(model->forward(batch.data), batch.target) / accumulation;
  // CHECK-NEXT: {{^ *}}accelerator.backward(loss);

  // The count in the condition itself: read as a value before backward(), incremented by the if.
  int64_t batch_idx = 0;
  for (auto &batch : *loader) {
    torch::mse_loss(model->forward(batch.data), batch.target).backward();
    if (++batch_idx % 3 == 0) {
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  // CHECK: {{^ *}}auto step = accelerator.accumulate_until((batch_idx + 1) % 3 == 0, model);
  // CHECK: {{^ *}}if (++batch_idx % 3 == 0) {

  // A count moved at the top of the body: the scope opens after it, still before backward().
  int seen = 0;
  for (auto &batch : *loader) {
    seen += 1;
    torch::mse_loss(model->forward(batch.data), batch.target).backward();
    if (seen % 4 == 0) {
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  // CHECK: {{^ *}}seen += 1;
  // CHECK-NEXT: {{^ *}}auto step = accelerator.accumulate_until(seen % 4 == 0, model);

  // A flag the body declares: the scope opens after its declaration.
  int64_t n = 0;
  for (auto &batch : *loader) {
    const bool steps = ++n % 2 == 0;
    torch::mse_loss(model->forward(batch.data), batch.target).backward();
    if (steps) {
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  // CHECK: {{^ *}}const bool steps = ++n % 2 == 0;
  // CHECK-NEXT: {{^ *}}auto step = accelerator.accumulate_until(steps, model);

  // A count that changes after backward() cannot be read before it: reported, accumulate() kept.
  int late = 0;
  for (auto &batch : *loader) {
    torch::mse_loss(model->forward(batch.data), batch.target).backward();
    late += batch.data.size(0);
    if (late % 8 == 0) {
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  // MSG: {{.*}}.tmp.cpp:[[@LINE-5]]:5: warning: this loop accumulates gradients by hand, but its step condition cannot be read before backward() (what its condition reads changes after backward()){{.*}}[accel-migrate-accumulate]
  // CHECK: {{^ *}}auto step = accelerator.accumulate(model);
  // CHECK-NEXT: {{^ *}}accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));

  // Stepping every batch: accumulate() as before.
  for (auto &batch : *loader) {
    optimizer.zero_grad();
    torch::mse_loss(model->forward(batch.data), batch.target).backward();
    optimizer.step();
  }
  // CHECK: {{^ *}}auto step = accelerator.accumulate(model);
  // CHECK-NEXT: {{^ *}}optimizer.zero_grad();

  // A model the loop uses that no optimizer here trains: the warning says it is not prepared.
  torch::nn::Linear features(2, 2);
  for (auto &batch : *loader) {
    optimizer.zero_grad();
    torch::mse_loss(model->forward(features->forward(batch.data)), batch.target).backward();
    optimizer.step();
  }
  // MSG: {{.*}}.tmp.cpp:[[@LINE-5]]:3: warning: model 'features' is used in this training loop but was not prepared: no optimizer seen here is built from its parameters(){{.*}}accelerator.prepare(features){{.*}}[accel-migrate-accumulate]
}
