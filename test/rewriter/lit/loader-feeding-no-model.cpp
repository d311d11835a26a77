// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
// A loader read in one pass to build a data structure (no model, no backward in its loop) is
// left as written: each process reads all of it, so the structure and the counts read from it
// are what one process has. Prepared, it would be split and padded (a batch larger than the
// data set gives each process copies of every point). The training loader beside it is prepared.
#include <torch/torch.h>

#include <cstdio>
#include <vector>

struct Points : torch::data::datasets::Dataset<Points> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({2}, static_cast<double>(i)), torch::ones({1})};
  }
  torch::optional<size_t> size() const override { return 100; }
};

int main() {
  std::vector<torch::Tensor> buckets;
  auto index_loader = torch::data::make_data_loader(
      Points().map(torch::data::transforms::Stack<>()), 1000000);
  for (auto &batch : *index_loader)
    buckets.push_back(batch.data.sum(1).floor());
  int64_t points = 0;
  for (const auto &bucket : buckets)
    points += bucket.size(0);
  std::printf("indexed %lld points\n", static_cast<long long>(points));

  torch::nn::Linear model(2, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 10);
  for (auto &batch : *loader) {
    optimizer.zero_grad();
    torch::mse_loss(model->forward(batch.data), batch.target).backward();
    optimizer.step();
  }
}
// MSG: loader-feeding-no-model.cpp.tmp.cpp:23:8: warning: data loader 'index_loader' feeds no model {{.*}}left as written{{.*}}[accel-migrate-prepare]
// CHECK: {{^}}  auto index_loader = torch::data::make_data_loader(
// CHECK: {{^}}  for (auto &batch : *index_loader)
// CHECK-NEXT: {{^}}    buckets.push_back(batch.data.sum(1).floor());
// CHECK: {{^}}  auto loader = accelerator.prepare_data_loader(
// CHECK: {{^}}    auto step = accelerator.accumulate(model);
