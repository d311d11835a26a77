// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
//
// The shape of mrdcvlsc/libtorch-cmake-template's MNIST program: a validation pass over a whole
// loader from inside the training loop, its summed loss reduced after it, and a best-so-far test
// on that loss guarding an early return (a failed export) before the training loop goes on to
// the model's forward after the loop. The loss is the same on every process once reduced, so the return
// is too: no divergence to refuse. A batch moved in place (`batch.data = batch.data.to(device)`)
// loses the whole statement, not just the move.
#include <torch/torch.h>
#include <cstdio>
#include <limits>

struct Points : torch::data::datasets::Dataset<Points> {
  explicit Points(int64_t n) : x(torch::randn({n, 4})), y(torch::randint(0, 2, {n})) {}
  torch::data::Example<> get(size_t i) override { return {x[i], y[i]}; }
  torch::optional<size_t> size() const override { return x.size(0); }
  torch::Tensor x, y;
};

bool export_best(torch::nn::Linear &model) { return model->weight.defined(); }

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  torch::nn::Linear model(4, 2);
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), 0.05);
  torch::nn::CrossEntropyLoss criterion;
  auto train = torch::data::make_data_loader(Points(256).map(torch::data::transforms::Stack<>()), 32);
  auto valid = torch::data::make_data_loader(Points(100).map(torch::data::transforms::Stack<>()), 25);
  float best = std::numeric_limits<float>::max();
  int index = 0;
  for (torch::data::Example<> &batch : *train) {
    batch.data = batch.data.to(device);
    batch.target = batch.target.to(device);
    optimizer.zero_grad();
    // CHECK: {{^}}  for (torch::data::Example<> &batch : *train) {
    // CHECK-NEXT: {{^}}    auto step = accelerator.accumulate(model);
    // CHECK-NEXT: {{^}}    optimizer.zero_grad();
    auto loss = torch::cross_entropy_loss(model->forward(batch.data), batch.target);
    loss.backward();
    optimizer.step();
    if (++index % 4 == 0) {
      float valid_loss = 0;
      int valid_batches = 0;
      for (torch::data::Example<> &v : *valid) {
        v.data = v.data.to(device);
        v.target = v.target.to(device);
        auto output = model->forward(v.data);
        auto batch_loss = criterion(output, v.target);
        valid_loss += batch_loss.item<float>();
        valid_batches++;
      }
      // CHECK: {{^}}      for (torch::data::Example<> &v : *valid) {
      // CHECK-NEXT: {{^}}        auto output = model->forward(v.data);
      // CHECK-NEXT: {{^}}        auto batch_loss = criterion(output, v.target);
      // CHECK-NEXT: {{^}}        valid_loss += batch_loss.item<float>();
      // CHECK-NEXT: {{^}}        valid_batches++;
      // CHECK-NEXT: {{^}}      }
      // CHECK-NEXT: {{^}}      valid_loss = accelerator.reduce(valid_loss);
      // CHECK-NEXT: {{^}}      valid_batches = accelerator.reduce(valid_batches);
      const float average = valid_loss / valid_batches;
      std::printf("valid %.5f\n", average);
      if (average < best) {
        best = average;
        if (!export_best(model))
          return 2;
      }
    }
  }
  torch::NoGradGuard no_grad;
  std::printf("final %.5f\n", model->forward(torch::ones({1, 4})).sum().item<float>());
}
// MSG-NOT: error
