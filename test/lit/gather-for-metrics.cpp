// RUN: cp %s %t.cpp
// RUN: %migrate --only=gather-for-metrics %t.cpp
// RUN: FileCheck %s --input-file=%t.cpp
#include <torch/torch.h>

int main() {
  torch::nn::Linear model(4, 3);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto dataset = torch::data::datasets::MNIST("unused").map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader(std::move(dataset), 4);
  int64_t correct = 0, total = 0;
  double loss_sum = 0;
  for (const auto &batch : *loader) {
    auto output = model->forward(batch.data);
    auto pred = output.argmax(1);
    correct += pred.eq(batch.target).sum().item<int64_t>();
    // CHECK: {{^ *}}correct += accelerator.gather_for_metrics(pred).eq(accelerator.gather_for_metrics(batch.target)).sum().item<int64_t>();
    total += batch.target.size(0);
    // CHECK: {{^ *}}total += accelerator.gather_for_metrics(batch.target).size(0);
    auto batch_loss = torch::nll_loss(output, batch.target).sum();
    loss_sum += batch_loss.item<double>();
    // A per-process scalar cannot be gathered per sample: left alone.
    // CHECK: {{^ *}}loss_sum += batch_loss.item<double>();
  }
  // Training loops are not evaluation loops.
  for (const auto &batch : *loader) {
    auto output = model->forward(batch.data);
    correct += output.argmax(1).eq(batch.target).sum().item<int64_t>();
    // CHECK: {{^ *}}correct += output.argmax(1).eq(batch.target).sum().item<int64_t>();
    torch::nll_loss(output, batch.target).backward();
  }
}
