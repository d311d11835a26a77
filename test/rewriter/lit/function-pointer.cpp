// RUN: cp %s %t.cpp
// RUN: not %migrate %t.cpp 2>&1 | FileCheck %s
// Nothing was changed.
// RUN: diff %s %t.cpp
//
// train() needs the accelerator as a parameter, but main calls it through a function pointer,
// whose call cannot be given it: the migration is refused, naming the function and the use.
#include <torch/torch.h>

struct Points : torch::data::datasets::Dataset<Points> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({2}, static_cast<double>(i)), torch::ones({1})};
  }
  torch::optional<size_t> size() const override { return 8; }
};

void train(torch::nn::Linear &model) {
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 4);
  for (auto &batch : *loader) {
    optimizer.zero_grad();
    torch::mse_loss(model->forward(batch.data), batch.target).backward();
    optimizer.step();
  }
}

int main() {
  torch::nn::Linear model(2, 1);
  void (*step)(torch::nn::Linear &) = train;
  step(model);
}
// CHECK: function-pointer.cpp.tmp.cpp:17:6: error: 'train' needs the accelerator as a parameter, but it is also used as a value at line 29:39 (a function pointer or a callback){{.*}}nothing was changed{{.*}}[accel-migrate-create-accelerator]
// CHECK: accel-migrate: error: the program cannot be migrated safely (above); no file was changed
