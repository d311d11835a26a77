// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
// The shape of DominionSoftware/LibTorchExamples' TrainSplitModels: the models are made in main
// as shared_ptrs and handed by value (copies of the pointer, the same modules) to the function
// that builds their optimizers and trains them. They are prepared where main makes them: the
// copy passed is bound as a temporary, and it still names main's model.
#include <torch/torch.h>
#include <memory>

class Coarse : public torch::nn::Module {
public:
  Coarse() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};

void train(std::shared_ptr<Coarse> coarse, std::shared_ptr<Coarse> fine, size_t epochs) {
  torch::optim::Adam coarse_optimizer(coarse->parameters(), 1e-3);
  torch::optim::Adam fine_optimizer(fine->parameters(), 1e-3);
  for (size_t e = 0; e < epochs; ++e) {
    coarse_optimizer.zero_grad();
    coarse->forward(torch::ones({2, 4})).sum().backward();
    coarse_optimizer.step();
    fine_optimizer.zero_grad();
    fine->forward(torch::ones({2, 4})).sum().backward();
    fine_optimizer.step();
  }
}

int main() {
  auto coarse = std::make_shared<Coarse>();
  auto fine = std::make_shared<Coarse>();
  train(coarse, fine, 2);
}
// CHECK: {{^}}  auto coarse = std::make_shared<Coarse>();
// CHECK-NEXT: {{^}}  accelerator.prepare(coarse);
// CHECK-NEXT: {{^}}  auto fine = std::make_shared<Coarse>();
// CHECK-NEXT: {{^}}  accelerator.prepare(fine);
// CHECK-NEXT: {{^}}  train(coarse, fine, 2);
// MSG-NOT: not prepared
