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
    // One collective for every tensor the metrics start from, before the first metric or the
    // first local only the metrics read, which is taken from the gathered tensors where it is
    // declared; the metric reading it is left as written:
    // CHECK: {{^}}    auto [all_output, all_target] = accelerator.gather_for_metrics(output, batch.target);
    // CHECK: {{^}}    auto pred = all_output.argmax(1);
    auto pred = output.argmax(1);
    // CHECK: {{^}}    correct += pred.eq(all_target).sum().item<int64_t>();
    correct += pred.eq(batch.target).sum().item<int64_t>();
    // A count of samples reads the gathered batch:
    // CHECK: {{^}}    total += all_target.size(0);
    total += batch.target.size(0);
    // CHECK: {{^}}    auto batch_loss = torch::nll_loss(all_output, all_target).sum();
    auto batch_loss = torch::nll_loss(output, batch.target).sum();
    // CHECK: {{^}}    loss_sum += batch_loss.item<double>();
    loss_sum += batch_loss.item<double>();
  }
  // A local the loop also reads for something else keeps its own batch's value; the metric
  // computes it again from the gathered batch instead.
  for (const auto &batch : *loader) {
    auto output = model->forward(batch.data);
    auto pred = output.argmax(1);
    // CHECK: {{^}}    auto pred = output.argmax(1);
    // CHECK: {{^}}    correct += all_output.argmax(1).eq(all_target).sum().item<int64_t>();
    correct += pred.eq(batch.target).sum().item<int64_t>();
    if (pred.numel() == 0)
      break;
  }
  // A mean loss times the batch size: the sum over the gathered samples, and the size counts
  // them without gathering the inputs.
  double running_loss = 0;
  for (const auto &batch : *loader) {
    auto data = batch.data.to(torch::kCPU);
    auto output = model->forward(data);
    // CHECK: {{^}}    auto [all_output, all_target] = accelerator.gather_for_metrics(output, batch.target);
    // CHECK: {{^}}    auto loss = torch::nn::functional::cross_entropy(all_output, all_target);
    auto loss = torch::nn::functional::cross_entropy(output, batch.target);
    // CHECK: {{^}}    running_loss += loss.item<double>() * all_output.size(0);
    running_loss += loss.item<double>() * data.size(0);
  }
  // Training loops are not evaluation loops.
  for (const auto &batch : *loader) {
    auto output = model->forward(batch.data);
    correct += output.argmax(1).eq(batch.target).sum().item<int64_t>();
    // CHECK: {{^ *}}correct += output.argmax(1).eq(batch.target).sum().item<int64_t>();
    torch::nll_loss(output, batch.target).backward();
  }
}
