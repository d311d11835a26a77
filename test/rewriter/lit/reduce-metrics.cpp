// RUN: cp %s %t.cpp
// RUN: %migrate --only=reduce-metrics %t.cpp
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --only=reduce-metrics --check %t.cpp
#include <torch/torch.h>
#include <cstdio>

// Training through a helper whose body is seen here, or through a method whose body is not (its
// class holds an optimizer and its name says it trains), is training all the same.
torch::Tensor train_step(torch::nn::Linear &model, torch::optim::SGD &optimizer,
                         const torch::Tensor &x) {
  optimizer.zero_grad();
  auto loss = model->forward(x).sum();
  loss.backward();
  optimizer.step();
  return loss.detach();
}
struct Fitter {
  torch::Tensor Update(const torch::Tensor &x);
  torch::Tensor Predict(const torch::Tensor &x);
  torch::nn::Linear model{4, 3};
  torch::optim::SGD optimizer{model->parameters(), 0.1};
};

int main() {
  torch::nn::Linear model(4, 3);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto dataset = torch::data::datasets::MNIST("unused").map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader(std::move(dataset), 4);
  for (int epoch = 0; epoch < 2; ++epoch) {
    double running_loss = 0;
    size_t correct = 0;
    int64_t batches = 0;
    auto loss_sum = torch::zeros({});
    double unused_after = 0;
    const double scale = 2.0;
    for (auto &batch : *loader) {
      auto output = model->forward(batch.data);
      auto loss = torch::nll_loss(output, batch.target);
      loss.backward();
      running_loss += loss.item<double>() * batch.data.size(0);
      correct += output.argmax(1).eq(batch.target).sum().item<int64_t>();
      ++batches;
      loss_sum += loss.detach();
      unused_after += scale;
    }
    // Summed across processes right after the loop, each once per epoch; what the loop only
    // reads, or what is not read after it, is left alone.
    // CHECK: {{^}}    }
    // CHECK-NEXT: {{^}}    running_loss = accelerator.reduce(running_loss);
    // CHECK-NEXT: {{^}}    correct = accelerator.reduce(correct);
    // CHECK-NEXT: {{^}}    batches = accelerator.reduce(batches);
    // CHECK-NEXT: {{^}}    loss_sum = accelerator.reduce(loss_sum);
    // CHECK: {{^}}    std::printf
    std::printf("%f %zu %f\n", running_loss / 60000, correct, loss_sum.item<double>() / batches);
  }
  // A count declared before the epochs and reset at the top of each is a per-epoch count; a count
  // the loop sets (from its own index) that divides a reduced sum is reduced with it, so that the
  // printed ratio keeps its meaning on N processes.
  int64_t batches_seen;
  for (int epoch = 0; epoch < 2; ++epoch) {
    double epoch_loss = 0;
    batches_seen = 0;
    size_t seen = 0, index = 0;
    for (auto &batch : *loader) {
      auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
      loss.backward();
      epoch_loss += loss.item<double>();
      ++batches_seen;
      seen = ++index;
    }
    // CHECK: {{^}}    epoch_loss = accelerator.reduce(epoch_loss);
    // CHECK-NEXT: {{^}}    batches_seen = accelerator.reduce(batches_seen);
    // CHECK-NEXT: {{^}}    seen = accelerator.reduce(seen);
    // CHECK-NOT: {{^ *}}index = accelerator
    // CHECK: {{^}}    std::printf("%f %f\n"
    std::printf("%f %f\n", epoch_loss / batches_seen, epoch_loss / static_cast<double>(seen));
  }
  // In an evaluation loop (no backward), a number computed per batch by the model, summed as it
  // is computed, is summed across processes too (left alone, the main process would print its
  // share of the data only); per-sample values are gather-for-metrics' business.
  double eval_loss = 0;
  for (auto &batch : *loader)
    eval_loss += model->forward(batch.data).sum().item<double>();
  // CHECK: {{^}}  eval_loss = accelerator.reduce(eval_loss);
  std::printf("%f\n", eval_loss);
  double helper_loss = 0;
  for (auto &batch : *loader)
    helper_loss += train_step(model, optimizer, batch.data).item<double>();
  // CHECK: {{^}}  helper_loss = accelerator.reduce(helper_loss);
  Fitter fitter;
  double method_loss = 0, predicted = 0;
  for (auto &batch : *loader)
    method_loss += fitter.Update(batch.data).item<double>();
  // CHECK: {{^}}  method_loss = accelerator.reduce(method_loss);
  for (auto &batch : *loader)
    predicted += fitter.Predict(batch.data).sum().item<double>();
  // CHECK: {{^}}  predicted = accelerator.reduce(predicted);
  std::printf("%f %f %f\n", helper_loss, method_loss, predicted);
}
