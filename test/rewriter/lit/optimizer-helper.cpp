// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
// An optimizer built by a helper of the program from the parameters() of the model it is given:
// the model passed to the helper is the one the optimizer trains, so it is prepared where it is
// created (on two processes the runtime would otherwise refuse the optimizer's parameters).
#include <torch/torch.h>

struct LanguageModelImpl : torch::nn::Module {
  LanguageModelImpl() : lstm(register_module("lstm", torch::nn::LSTM(4, 8))),
                        head(register_module("head", torch::nn::Linear(8, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return head(std::get<0>(lstm(x))); }
  torch::nn::LSTM lstm;
  torch::nn::Linear head;
};
TORCH_MODULE(LanguageModel);

torch::optim::Adam make_optimizer(LanguageModel &model, double rate) {
  return torch::optim::Adam(model->parameters(), torch::optim::AdamOptions(rate));
}

struct Tokens : torch::data::datasets::Dataset<Tokens> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({3, 4}, static_cast<double>(i)), torch::zeros({3, 4})};
  }
  torch::optional<size_t> size() const override { return 8; }
};

int main() {
  LanguageModel model;
  auto optimizer = make_optimizer(model, 1e-3);
  auto loader = torch::data::make_data_loader(Tokens(), 2);
  for (auto &batch : *loader) {
    optimizer.zero_grad();
    auto inputs = torch::stack({batch[0].data, batch[1].data}, 1);
    auto targets = torch::stack({batch[0].target, batch[1].target}, 1);
    torch::mse_loss(model->forward(inputs), targets).backward();
    optimizer.step();
  }
}
// CHECK: {{^}}torch::optim::Adam make_optimizer(LanguageModel &model, double rate) {
// CHECK: {{^}}  LanguageModel model;
// CHECK-NEXT: {{^}}  accelerator.prepare(model);
// CHECK-NEXT: {{^}}  auto optimizer = accelerator.prepare(make_optimizer(model, 1e-3));
// CHECK: {{^}}    auto step = accelerator.accumulate(model);
// MSG-NOT: not prepared
