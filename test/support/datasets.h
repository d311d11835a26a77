#pragma once

// Small synthetic data sets shared by the tests, so nothing is downloaded.

#include <torch/torch.h>

#include <cstdint>

namespace accel_test {

/// Samples 0..size-1, each sample being its own index (batches are vectors of indices).
class RangeDataset : public torch::data::datasets::Dataset<RangeDataset, int64_t> {
 public:
  explicit RangeDataset(size_t size) : size_(size) {}
  int64_t get(size_t index) override { return static_cast<int64_t>(index); }
  torch::optional<size_t> size() const override { return size_; }

 private:
  size_t size_;
};

/// Accelerate's RegressionDataset: x ~ N(0, 1), y = a*x + b + 0.1 * noise, from a fixed seed.
class RegressionDataset : public torch::data::datasets::Dataset<RegressionDataset> {
 public:
  explicit RegressionDataset(int64_t length = 64, double a = 2, double b = 3, uint64_t seed = 42) {
    auto generator = torch::make_generator<torch::CPUGeneratorImpl>(seed);
    x_ = torch::randn({length, 1}, generator);
    y_ = a * x_ + b + 0.1 * torch::randn({length, 1}, generator);
  }
  torch::data::Example<> get(size_t index) override {
    return {x_[static_cast<int64_t>(index)], y_[static_cast<int64_t>(index)]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(x_.size(0)); }

 private:
  torch::Tensor x_;
  torch::Tensor y_;
};

/// Accelerate's RegressionModel: y = a*x + b, from a = b = 0.
struct RegressionModelImpl : torch::nn::Module {
  RegressionModelImpl() {
    a = register_parameter("a", torch::zeros({1}));
    b = register_parameter("b", torch::zeros({1}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x * a + b; }
  torch::Tensor a, b;
};
TORCH_MODULE(RegressionModel);

/// Linear decay as Python's LambdaLR(lambda k: 1 - k / 10): lr = base * (1 - k / 10).
class LinearDecay : public torch::optim::LRScheduler {
 public:
  explicit LinearDecay(torch::optim::Optimizer& optimizer)
      : LRScheduler(optimizer), base_(optimizer.param_groups()[0].options().get_lr()) {}

 protected:
  std::vector<double> get_lrs() override {
    ++steps_;
    return {base_ * (1.0 - steps_ / 10.0)};
  }

 private:
  double base_;
  int steps_ = 0;
};

inline double learning_rate(torch::optim::Optimizer& optimizer) {
  return optimizer.param_groups()[0].options().get_lr();
}

}  // namespace accel_test
