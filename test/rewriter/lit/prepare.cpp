// RUN: cp %s %t.cpp
// RUN: %migrate --only=prepare %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
#include <torch/torch.h>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc->forward(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

int main() {
  Net model;
  torch::load(model, "weights.pt");
  // Prepared after its weights are loaded, so that rank 0's loaded weights are broadcast.
  // CHECK: {{^}}  torch::load(model, "weights.pt");
  // CHECK-NEXT: {{^}}  accelerator.prepare(model);
  auto critic = std::make_shared<NetImpl>();
  // CHECK: {{^}}  auto critic = std::make_shared<NetImpl>();
  // CHECK-NEXT: {{^}}  accelerator.prepare(critic);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  // CHECK: {{^ *}}auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)));
  torch::optim::Adam critic_opt = torch::optim::Adam(critic->parameters(), 1e-3);
  // CHECK: {{^ *}}auto critic_opt = accelerator.prepare(torch::optim::Adam(critic->parameters(), 1e-3));
  torch::optim::StepLR scheduler(optimizer, 10, 0.5);
  // CHECK: {{^ *}}auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, 10, 0.5));
  auto dataset = torch::data::datasets::TensorDataset({torch::ones({8, 4})});
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset), torch::data::DataLoaderOptions(4));
  // CHECK: {{^ *}}auto loader = accelerator.prepare_data_loader<torch::data::samplers::SequentialSampler>(
  std::vector<torch::Tensor> loose = {torch::ones({2}, torch::requires_grad())};
  torch::optim::SGD orphan(loose, 0.1);
  // MSG: {{.*}}.tmp.cpp:[[@LINE-1]]:21: warning: the parameters of optimizer 'orphan' do not come from a model variable declared here{{.*}}[accel-migrate-prepare]
}
