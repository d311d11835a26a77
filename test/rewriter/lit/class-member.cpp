// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// The result compiles (a second run parses it) and has nothing left to migrate.
// RUN: %migrate --check %t.cpp
//
// A class that owns its model and optimizer keeps its members, constructors and construction
// sites as written: each constructor prepares the model at its end and the optimizer where it is
// initialized with the process's Accelerator (accel::Accelerator::current()), and a method binds
// it at the top of its body.
#include <torch/torch.h>

#include <memory>

struct Base {
  explicit Base(int id) : id(id) {}
  int id;
};

class Trainer : public Base {
public:
  Trainer(int64_t inputs, double lr)
      : Base(1), model_(inputs, 1), optimizer_(model_->parameters(), lr) {}
  // CHECK: {{^}}  Trainer(int64_t inputs, double lr)
  // CHECK-NEXT: {{^}}      : Base(1), model_(inputs, 1),
  // CHECK-SAME: optimizer_(accel::Accelerator::current().prepare(torch::optim::SGD(model_->parameters(), lr))) {
  // CHECK-NEXT: {{^}}    accel::Accelerator::current().prepare(model_);
  // CHECK-NEXT: {{^}}  }
  Trainer() : Trainer(4, 0.1) {}
  // CHECK: {{^}}  Trainer() : Trainer(4, 0.1) {}

  void step(torch::Tensor x) {
    optimizer_.zero_grad();
    model_->forward(x).sum().backward();
    optimizer_.step();
  }
  // CHECK: {{^}}  void step(torch::Tensor x) {
  // CHECK-NEXT: {{^}}    accel::Accelerator &accelerator = accel::Accelerator::current();
  // CHECK: {{^}}    accelerator.backward(model_->forward(x).sum());

private:
  torch::nn::Linear model_;
  torch::optim::SGD optimizer_;
};
// CHECK: {{^}}private:
// CHECK-NEXT: {{^}}  torch::nn::Linear model_;
// CHECK-NEXT: {{^}}  accel::AcceleratedOptimizer<torch::optim::SGD> optimizer_;

// The optimizer initialized where it is declared; a constructor with an empty body and no
// initializer list.
struct Fitter {
  Fitter() { model->to(torch::kCPU); }
  // CHECK: {{^}}  Fitter() {
  // CHECK-NEXT: {{^}}    accel::Accelerator &accelerator = accel::Accelerator::current();
  // CHECK-NEXT: {{^}}    model->to(torch::kCPU);
  // CHECK-NEXT: {{^}}    accelerator.prepare(model);
  // CHECK-NEXT: {{^}}  }
  torch::nn::Linear model{2, 1};
  torch::optim::Adam adam{model->parameters(), 1e-3};
};
// CHECK: {{^}}  torch::nn::Linear model{2, 1};
// CHECK-NEXT: {{^}}  accel::AcceleratedOptimizer<torch::optim::Adam> adam{
// CHECK-SAME: accel::Accelerator::current().prepare(torch::optim::Adam{model->parameters(), 1e-3})};

// A class the accelerator never reaches is left alone.
struct Plain {
  Plain() {}
  int value = 0;
};
// CHECK: {{^}}struct Plain {
// CHECK-NEXT: {{^}}  Plain() {}

void train(Trainer &trainer) { trainer.step(torch::ones({3, 4})); }

// CHECK: {{^}}int main() {
// CHECK-NEXT: {{^}}  accel::Accelerator accelerator;
// CHECK-NEXT: {{^}}  Trainer *trainer = new Trainer(4, 0.1);
// CHECK-NEXT: {{^}}  Trainer defaults;
// CHECK-NEXT: {{^}}  auto owned = std::make_unique<Trainer>();
// CHECK-NEXT: {{^}}  auto shared = std::make_shared<Fitter>();
// CHECK-NEXT: {{^}}  Plain plain;
int main() {
  Trainer *trainer = new Trainer(4, 0.1);
  Trainer defaults;
  auto owned = std::make_unique<Trainer>();
  auto shared = std::make_shared<Fitter>();
  Plain plain;
  train(*trainer);
  train(defaults);
  train(*owned);
  delete trainer;
  return plain.value + static_cast<int>(shared != nullptr);
}
// MSG: 9 changes (add-include 1, backward 1, create-accelerator 3, prepare 4), 0 warnings
