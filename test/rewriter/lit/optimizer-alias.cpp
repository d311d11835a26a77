// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
//
// The shape of DominionSoftware/LibTorchExamples' HybridOptimizer: a class owns two optimizers
// (unique_ptr members made in its constructor) and a raw pointer to the one in use, switched when
// the loss stalls. The two it makes are prepared where they are made; the pointer that points at
// one of them is left alone (prepared again under the stall test, the switch would prepare on
// the processes whose loss stalled only).
#include <torch/torch.h>
#include <memory>

class Switching {
public:
  explicit Switching(torch::nn::Linear model) : model_(model) {
    adam_ = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
    sgd_ = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(1e-2));
    current_ = adam_.get();
  }
  // CHECK: {{^}}    adam_ = accelerator.prepare(std::make_unique<torch::optim::Adam>(
  // CHECK: {{^}}    sgd_ = accelerator.prepare(std::make_unique<torch::optim::SGD>(
  // CHECK: {{^}}    current_ = adam_.get();
  void step() { current_->step(); }
  void zero_grad() { current_->zero_grad(); }
  void epoch_end(float loss) {
    if (loss > best_) {
      current_ = sgd_.get();
    } else {
      best_ = loss;
    }
  }
  // CHECK: {{^}}      current_ = sgd_.get();

private:
  torch::nn::Linear model_;
  std::unique_ptr<torch::optim::Adam> adam_;
  std::unique_ptr<torch::optim::SGD> sgd_;
  torch::optim::Optimizer *current_ = nullptr;
  float best_ = 1e9;
};

int main() {
  torch::nn::Linear model(4, 1);
  Switching optimizer(model);
  auto data = torch::data::make_data_loader(
      torch::data::datasets::TensorDataset({torch::randn({16, 4})}), 4);
  for (int epoch = 0; epoch < 2; ++epoch) {
    float sum = 0;
    for (auto &batch : *data) {
      optimizer.zero_grad();
      auto loss = model(batch[0].data.unsqueeze(0)).pow(2).mean();
      loss.backward();
      optimizer.step();
      sum += loss.item<float>();
    }
    optimizer.epoch_end(sum);
  }
}
// MSG-NOT: error
