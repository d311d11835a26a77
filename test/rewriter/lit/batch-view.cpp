// RUN: cp %s %t.cpp
// RUN: %migrate --only=batch-view,remove-placement,prepare %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// MSG: 7 changes (add-include 1, batch-view 1,
#include <torch/torch.h>

int main() {
  const int64_t batch_size = 64;
  torch::Device device(torch::kCUDA);
  torch::nn::Linear model(784, 10);
  auto dataset = torch::data::datasets::MNIST("unused").map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader(std::move(dataset), batch_size);
  for (auto &batch : *loader) {
    auto fixed = model->forward(batch.data.view({batch_size, -1}).to(device));
    // A fixed batch size becomes the batch's own (a process's share on N processes; the same on
    // one, where every batch had batch_size samples); the placement after a shape change goes:
    // the batch is on the device already.
    // CHECK: {{^}}    auto fixed = model->forward(batch.data.view({batch.data.size(0), -1}));
    auto follows = model->forward(batch.data.reshape({batch.data.size(0), 784}).to(device));
    // CHECK: {{^}}    auto follows = model->forward(batch.data.reshape({batch.data.size(0), 784}));
    auto image = batch.data.view({-1, 1, 28, 28}).flatten(1).to(device);
    // CHECK: {{^}}    auto image = batch.data.view({-1, 1, 28, 28}).flatten(1);
  }
  // Not a loader's batch: left alone, and no report.
  auto other = torch::zeros({batch_size * 784}).view({batch_size, 784}).to(device);
  // CHECK: {{^}}  auto other = torch::zeros({batch_size * 784}).view({batch_size, 784}).to(device);
}
// MSG-NOT: warning:
