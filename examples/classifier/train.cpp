// A plain single-GPU LibTorch training program, written the way LibTorch's MNIST example is:
// a device chosen with cuda::is_available(), .to(device) everywhere, train() and test()
// functions taking the data loader as a template parameter. accel-migrate turns it into a
// libaccel program (see the test that migrates, builds and launches it).
//
// The data is synthetic (no download): points in 8 dimensions, labelled by which of 4 fixed
// centres they are nearest to.
#include <torch/torch.h>

#include <cstdio>
#include <iostream>

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x));
    return torch::log_softmax(fc2->forward(x), /*dim=*/1);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// Labelled points around four centres; the same on every run.
class Blobs : public torch::data::datasets::Dataset<Blobs> {
public:
  Blobs(int64_t size, uint64_t seed) {
    torch::manual_seed(0);
    const auto centres = torch::randn({4, 8}) * 3; // the same for every split
    torch::manual_seed(seed);
    targets_ = torch::randint(0, 4, {size}, torch::kLong);
    inputs_ = centres.index_select(0, targets_) + torch::randn({size, 8});
  }
  torch::data::Example<> get(size_t index) override {
    return {inputs_[index], targets_[index]};
  }
  torch::optional<size_t> size() const override { return inputs_.size(0); }

private:
  torch::Tensor inputs_, targets_;
};

template <typename DataLoader>
void train(size_t epoch, Net& model, torch::Device device, DataLoader& data_loader,
           torch::optim::Optimizer& optimizer) {
  model.train();
  size_t batch_idx = 0;
  for (auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    auto loss = torch::nll_loss(output, targets);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model.parameters(), 5.0);
    optimizer.step();
    if (batch_idx++ % 10 == 0) {
      std::printf("epoch %zu batch %zu loss %.4f\n", epoch, batch_idx, loss.template item<float>());
    }
  }
}

template <typename DataLoader>
void test(Net& model, torch::Device device, DataLoader& data_loader, size_t dataset_size) {
  torch::NoGradGuard no_grad;
  model.eval();
  double test_loss = 0;
  int64_t correct = 0;
  int64_t seen = 0;
  for (const auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    auto output = model.forward(data);
    test_loss += torch::nll_loss(output, targets, {}, torch::Reduction::Sum).template item<double>();
    auto pred = output.argmax(1);
    correct += pred.eq(targets).sum().template item<int64_t>();
    seen += targets.size(0);
  }
  test_loss /= dataset_size;
  std::printf("test: seen %lld of %zu, loss %.4f, accuracy %.4f\n",
              static_cast<long long>(seen), dataset_size, test_loss,
              static_cast<double>(correct) / dataset_size);
}

int main() {
  torch::manual_seed(1);
  torch::DeviceType device_type;
  if (torch::cuda::is_available()) {
    std::cout << "CUDA available! Training on GPU." << std::endl;
    device_type = torch::kCUDA;
  } else {
    std::cout << "Training on CPU." << std::endl;
    device_type = torch::kCPU;
  }
  torch::Device device(device_type);

  Net model;
  model.to(device);

  auto train_set = Blobs(1000, 7).map(torch::data::transforms::Stack<>());
  auto train_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(train_set), 32);
  auto test_set = Blobs(203, 8).map(torch::data::transforms::Stack<>());
  const size_t test_size = test_set.size().value();
  auto test_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(test_set), 50);

  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/1, /*gamma=*/0.9);

  for (size_t epoch = 1; epoch <= 3; ++epoch) {
    train(epoch, model, device, *train_loader, optimizer);
    scheduler.step();
    test(model, device, *test_loader, test_size);
  }
  torch::save(optimizer, "classifier_optimizer.pt");
  std::cout << "done" << std::endl;
}
