// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// The result compiles (a second run parses it) and has nothing left to migrate.
// RUN: %migrate --check %t.cpp
//
// A trainer that holds its model and optimizer as pointer members with empty default member
// initialisers (`T *name{};`), a defaulted constructor, and a set-up method that creates both
// after construction: the model is prepared right after it is set (before the optimizer takes
// its parameters), never in the constructor, where it is still null; the members' declarations
// are left as written, and so is the defaulted constructor: the methods bind the process's
// Accelerator.
#include <torch/torch.h>

struct Net : torch::nn::Module {
  Net() { fc = register_module("fc", torch::nn::Linear(4, 1)); }
  torch::Tensor forward(torch::Tensor x) { return fc->forward(x); }
  torch::nn::Linear fc{nullptr};
};

class Trainer {
 public:
  Trainer() = default;
  // CHECK: {{^}}  Trainer() = default;
  ~Trainer() {
    delete optimizer_;
    delete model_;
  }
  void setup() {
    model_ = new Net();
    optimizer_ = new torch::optim::Adam(model_->parameters(), 1e-2);
  }
  // CHECK: {{^}}  void setup() {
  // CHECK-NEXT: {{^}}    accel::Accelerator &accelerator = accel::Accelerator::current();
  // CHECK-NEXT: {{^}}    model_ = new Net();
  // CHECK-NEXT: {{^}}    accelerator.prepare(model_);
  // CHECK-NEXT: {{^}}    optimizer_ = {{(accelerator.prepare\(new torch::optim::Adam\(model_->parameters\(\), 1e-2\)\);)?}}
  void reset() {
    delete model_;
    model_ = nullptr;
  }
  // CHECK: {{^}}    model_ = nullptr;
  // CHECK-NEXT: {{^}}  }
  double train(int steps) {
    auto x = torch::randn({64, 4});
    auto y = x.sum(1, true);
    double last = 0;
    for (int i = 0; i < steps; ++i) {
      optimizer_->zero_grad();
      auto loss = torch::mse_loss(model_->forward(x), y);
      loss.backward();
      optimizer_->step();
      last = loss.item<double>();
    }
    return last;
  }

 private:
  Net *model_{};
  torch::optim::Adam *optimizer_{};
  // CHECK: {{^}}  Net *model_{};
  // CHECK-NEXT: {{^}}  torch::optim::Adam *optimizer_{};
};

// CHECK: {{^}}int main() {
// CHECK-NEXT: {{^}}  accel::Accelerator accelerator;
// CHECK-NEXT: {{^}}  Trainer trainer;
int main() {
  Trainer trainer;
  trainer.setup();
  return trainer.train(5) > 0 ? 0 : 1;
}
// MSG-NOT: error
// MSG: accel-migrate: {{.*}}.tmp.cpp: {{[0-9]+}} changes
