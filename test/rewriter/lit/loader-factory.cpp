// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
//
// The shape of DominionSoftware/LibTorchExamples' datasets: an interface whose getDataLoader()
// spells out the StatelessDataLoader it returns, a class that makes it there
// (`return make_data_loader(...)`), and a training function that gets it through the interface.
// The loader is prepared where it is made, the spelled-out types follow (the interface's and the
// override's), and the loop over what the caller gets is a loop over a prepared loader. In its
// evaluation, batches are vectors of examples stacked by hand: a count of a tensor derived from
// them is the gathered batch's count.
#include <torch/torch.h>
#include <memory>
#include <vector>

struct Points : torch::data::datasets::Dataset<Points> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({4}, static_cast<float>(i)), torch::tensor(static_cast<int64_t>(i % 2))};
  }
  torch::optional<size_t> size() const override { return 16; }
};

class DataSource {
public:
  virtual ~DataSource() = default;
  virtual auto loader() -> std::unique_ptr<torch::data::StatelessDataLoader<
      Points, torch::data::samplers::RandomSampler>> = 0;
};
// CHECK: {{^}}  virtual auto loader() -> std::unique_ptr<accel::DataLoader<

class PointSource : public DataSource {
public:
  auto loader() -> std::unique_ptr<torch::data::StatelessDataLoader<
      Points, torch::data::samplers::RandomSampler>> override {
    return torch::data::make_data_loader(Points(), torch::data::DataLoaderOptions(4));
  }
};
// CHECK: {{^}}  auto loader() -> std::unique_ptr<accel::DataLoader<
// CHECK: {{^}}    return accelerator.prepare_data_loader(Points(), torch::data::DataLoaderOptions(4));

void train(torch::nn::Linear &model, DataSource &source) {
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto train_loader = source.loader();
  for (auto &batch : *train_loader) {
    std::vector<torch::Tensor> inputs, targets;
    for (const auto &example : batch) {
      inputs.push_back(example.data);
      targets.push_back(example.target);
    }
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model(torch::stack(inputs)), torch::stack(targets));
    loss.backward();
    optimizer.step();
  }
  // CHECK: {{^}}  for (auto &batch : *train_loader) {
  // CHECK-NEXT: {{^}}    auto step = accelerator.accumulate(model);
  torch::NoGradGuard no_grad;
  int64_t correct = 0, seen = 0;
  auto test_loader = source.loader();
  for (auto &batch : *test_loader) {
    std::vector<torch::Tensor> inputs, targets;
    for (const auto &example : batch) {
      inputs.push_back(example.data);
      targets.push_back(example.target);
    }
    auto target = torch::stack(targets).to(torch::kInt64);
    auto output = model(torch::stack(inputs));
    correct += output.argmax(1).eq(target).sum().item<int64_t>();
    seen += target.size(0);
  }
  // CHECK: {{^}}    correct += all_output.argmax(1).eq(all_target).sum().item<int64_t>();
  // CHECK-NEXT: {{^}}    seen += all_target.size(0);
  std::printf("%.4f\n", static_cast<double>(correct) / seen);
}

int main() {
  torch::nn::Linear model(4, 2);
  PointSource source;
  train(model, source);
}
// MSG-NOT: error
// MSG-NOT: warning:
