// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
// A training loop in a function template instantiated twice with two model types, in one
// instantiated once with a model and once with a type that is none, and in a class template's
// member: each loop gets one accumulate scope and one set of reductions after it, whatever the
// template's pattern and each instantiation see. A name is accumulate()'s argument only where
// every instantiation has a model by it. No signature changes.
#include <torch/torch.h>

#include <cstdio>
#include <memory>

struct Points : torch::data::datasets::Dataset<Points> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({4}, static_cast<double>(i)), torch::ones({1})};
  }
  torch::optional<size_t> size() const override { return 16; }
};

// Not a module: a fixed map the loop also runs through the same template.
struct Affine {
  torch::Tensor w = torch::ones({4, 1}, torch::requires_grad());
  torch::Tensor forward(torch::Tensor x) { return x.matmul(w); }
};

template <typename Model, typename Loader>
void train_model(Model &model, Loader &loader, torch::optim::Optimizer &optimizer) {
  float last = 0;
  double sum = 0;
  for (auto &batch : loader) {
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
    loss.backward();
    optimizer.step();
    last = loss.template item<float>();
    sum += loss.template item<double>();
  }
  std::printf("%f %f\n", last, sum);
}
// CHECK: {{^}}void train_model(Model &model, Loader &loader, torch::optim::Optimizer &optimizer) {
// CHECK-NEXT: {{^}}  accel::Accelerator &accelerator = accel::Accelerator::current();
// CHECK: {{^}}  for (auto &batch : loader) {
// CHECK-NEXT: {{^}}    auto step = accelerator.accumulate();
// CHECK-NOT: accumulate
// CHECK: {{^}}  }
// CHECK-NEXT: {{^}}  last = accelerator.reduce(last, accel::Reduction::Mean);
// CHECK-NEXT: {{^}}  sum = accelerator.reduce(sum);
// CHECK-NEXT: {{^}}  accelerator.printf("%f %f\n", last, sum);

template <typename Model, typename Loader>
void fit(Model &model, Loader &loader, torch::optim::Optimizer &optimizer) {
  for (auto &batch : loader) {
    optimizer.zero_grad();
    model->forward(batch.data).sum().backward();
    optimizer.step();
  }
}
// CHECK: {{^}}void fit(Model &model, Loader &loader, torch::optim::Optimizer &optimizer) {
// CHECK-NEXT: {{^}}  accel::Accelerator &accelerator = accel::Accelerator::current();
// CHECK-NEXT: {{^}}  for (auto &batch : loader) {
// CHECK-NEXT: {{^}}    auto step = accelerator.accumulate(model);
// CHECK-NEXT: {{^}}    optimizer.zero_grad();

template <typename Model>
class Trainer {
public:
  explicit Trainer(Model model) : model_(model) {}
  template <typename Loader>
  void train(Loader &loader, torch::optim::Optimizer &optimizer) {
    for (auto &batch : loader) {
      optimizer.zero_grad();
      model_->forward(batch.data).sum().backward();
      optimizer.step();
    }
  }

private:
  Model model_;
};
// CHECK: {{^}}  void train(Loader &loader, torch::optim::Optimizer &optimizer) {
// CHECK-NEXT: {{^}}    accel::Accelerator &accelerator = accel::Accelerator::current();
// CHECK-NEXT: {{^}}    for (auto &batch : loader) {
// CHECK-NEXT: {{^}}      auto step = accelerator.accumulate({{.*}});
// CHECK-NEXT: {{^}}      optimizer.zero_grad();

int main() {
  torch::nn::Linear a(4, 1);
  auto b = std::make_shared<Affine>();
  torch::optim::SGD oa(a->parameters(), 0.1);
  torch::optim::SGD ob(std::vector<torch::Tensor>{b->w}, 0.1);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 4);
  train_model(a, *loader, oa);
  train_model(b, *loader, ob);
  torch::nn::Sequential c(torch::nn::Linear(4, 1));
  torch::optim::SGD oc(c->parameters(), 0.1);
  fit(a, *loader, oa);
  fit(c, *loader, oc);
  Trainer<torch::nn::Linear> t(a);
  t.train(*loader, oa);
  Trainer<torch::nn::Linear> u(torch::nn::Linear(4, 1));
  u.train(*loader, oa);
}
// MSG: templates.cpp.tmp.cpp:32:3: warning: no model is used in this training loop by name
// MSG-NOT: error
