// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
//
// Loaders named by their type (prabhuomkar/pytorch-cpp's image captioning takes its validation
// loader as `const ValidationLoader<TDataset>&`, an alias of the StatelessDataLoader type) take
// the prepared loader's type, accel::DataLoader with the same arguments; and a template given
// `decltype(optimizer)` (its hand-written StepLR, keyed on the optimizer's type) gets the type
// the optimizer was declared with, which the prepared optimizer derives from.
#include <torch/torch.h>
#include <cstdio>
#include <memory>

struct Points : torch::data::datasets::Dataset<Points> {
  explicit Points(int64_t n) : x(torch::randn({n, 4})), y(x.sum(1, true)) {}
  torch::data::Example<> get(size_t i) override { return {x[i], y[i]}; }
  torch::optional<size_t> size() const override { return x.size(0); }
  torch::Tensor x, y;
};

template <typename TDataset>
using ValidationLoader = std::unique_ptr<
    torch::data::StatelessDataLoader<TDataset, torch::data::samplers::SequentialSampler>>;
// CHECK: {{^}}    accel::DataLoader<TDataset, torch::data::samplers::SequentialSampler>>;

template <typename TOptimizer> struct OptionsOf {};
template <> struct OptionsOf<torch::optim::SGD> { using type = torch::optim::SGDOptions; };

template <typename TOptimizer> struct HalveRate {
  explicit HalveRate(TOptimizer& optimizer) : optimizer(optimizer) {}
  void step() {
    for (auto& group : optimizer.param_groups()) {
      auto& options = static_cast<typename OptionsOf<TOptimizer>::type&>(group.options());
      options.lr(options.lr() / 2);
    }
  }
  TOptimizer& optimizer;
};

template <typename TDataset>
double evaluate(torch::nn::Linear& model, const ValidationLoader<TDataset>& loader) {
  torch::NoGradGuard no_grad;
  double loss = 0;
  // A loss summed as it is computed (no variable) is one number per batch all the same.
  for (auto& batch : *loader)
    loss += torch::mse_loss(model->forward(batch.data), batch.target).template item<double>();
  // CHECK: {{^}}  loss = accelerator.reduce(loss);
  // CHECK: {{^}}  return loss;
  return loss;
}

using namespace torch::data;

template <typename TDataset>
void train(torch::nn::Linear& model, torch::optim::SGD& optimizer,
           StatelessDataLoader<TDataset, samplers::RandomSampler>& loader) {
  // CHECK: {{^}}           accel::DataLoader<TDataset, samplers::RandomSampler>& loader) {
  for (auto& batch : loader) {
    optimizer.zero_grad();
    torch::mse_loss(model->forward(batch.data), batch.target).backward();
    optimizer.step();
  }
}

int main() {
  torch::manual_seed(0);
  auto dataset = Points(64).map(transforms::Stack<>());
  std::unique_ptr<torch::data::StatelessDataLoader<decltype(dataset), samplers::RandomSampler>>
      train_loader = torch::data::make_data_loader<samplers::RandomSampler>(dataset, 16);
  // CHECK: {{^}}  std::unique_ptr<accel::DataLoader<decltype(dataset), samplers::RandomSampler>>
  // CHECK-NEXT: {{^}}      train_loader = accelerator.prepare_data_loader<samplers::RandomSampler>(dataset, 16);
  auto test_loader = torch::data::make_data_loader<samplers::SequentialSampler>(dataset, 16);
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.05);
  HalveRate<decltype(optimizer)> schedule(optimizer);
  // CHECK: {{^}}  HalveRate<torch::optim::SGD> schedule(optimizer);
  for (int epoch = 0; epoch < 3; ++epoch) {
    train(model, optimizer, *train_loader);
    schedule.step();
    std::printf("epoch %d loss %.6f\n", epoch, evaluate(model, test_loader));
  }
}
// MSG-NOT: error
// MSG-NOT: written-out type
