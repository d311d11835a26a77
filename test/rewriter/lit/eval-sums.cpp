// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
//
// A number per batch summed through item() (a model's loss) is summed across processes after
// the loop, with the count that divides it, in evaluation as in training: gathered, the loss
// would have one element per process and item() would throw. What the evaluation reads per
// sample (predictions against targets) is still gathered. A batch's number kept for after the
// loop (the last batch's loss) is the processes' mean, as in training.
#include <torch/torch.h>
#include <cstdio>

struct Points : torch::data::datasets::Dataset<Points> {
  explicit Points(int64_t n) : x(torch::randn({n, 4})), y(torch::randint(0, 2, {n})) {}
  torch::data::Example<> get(size_t i) override { return {x[i], y[i]}; }
  torch::optional<size_t> size() const override { return x.size(0); }
  torch::Tensor x, y;
};

int main() {
  torch::nn::Linear model(4, 2);
  torch::optim::SGD optimizer(model->parameters(), 0.05);
  auto train = torch::data::make_data_loader(Points(256).map(torch::data::transforms::Stack<>()), 32);
  auto test = torch::data::make_data_loader(Points(100).map(torch::data::transforms::Stack<>()), 32);
  for (int epoch = 0; epoch < 3; ++epoch) {
    double train_loss = 0;
    for (auto& batch : *train) {
      optimizer.zero_grad();
      auto loss = torch::cross_entropy_loss(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      train_loss += loss.item<double>();
    }
    // CHECK: {{^}}    train_loss = accelerator.reduce(train_loss);
    torch::NoGradGuard no_grad;
    double losses = 0, weighted = 0, last = 0;
    int64_t batches = 0, correct = 0;
    for (auto& batch : *test) {
      auto loss = torch::cross_entropy_loss(model->forward(batch.data), batch.target);
      losses += loss.item<double>();
      weighted += loss.item<double>() * batch.data.size(0);
      last = loss.item<double>();
      ++batches;
    }
    // CHECK-NOT: {{^ *}}auto {{.*}}gather_for_metrics(loss
    // CHECK: {{^}}      losses += loss.item<double>();
    // CHECK-NEXT: {{^}}      weighted += loss.item<double>() * batch.data.size(0);
    // CHECK-NEXT: {{^}}      last = loss.item<double>();
    // CHECK-NEXT: {{^}}      ++batches;
    // CHECK-NEXT: {{^}}    }
    // CHECK-NEXT: {{^}}    losses = accelerator.reduce(losses);
    // CHECK-NEXT: {{^}}    weighted = accelerator.reduce(weighted);
    // CHECK-NEXT: {{^}}    last = accelerator.reduce(last, accel::Reduction::Mean);
    // CHECK-NEXT: {{^}}    batches = accelerator.reduce(batches);
    for (auto& batch : *test) {
      auto output = model->forward(batch.data);
      correct += output.argmax(1).eq(batch.target).sum().item<int64_t>();
    }
    // CHECK: {{^}}      auto [all_output, all_target] = accelerator.gather_for_metrics(output, batch.target);
    // CHECK-NEXT: {{^}}      correct += all_output.argmax(1).eq(all_target).sum().item<int64_t>();
    // CHECK-NOT: {{^ *}}correct = accelerator.reduce
    std::printf("epoch %d train %.6f test %.6f %.6f last %.6f accuracy %.4f\n", epoch, train_loss,
                losses / batches, weighted / 100, last, correct / 100.0);
  }
}
// MSG-NOT: error
