// Laid out as LibTorch's own MNIST example: train() and test() are function templates taking
// the model, the device, the loader, the optimizer as torch::optim::Optimizer&, and the dataset
// size; the device is chosen with `if (torch::cuda::is_available())`; the data is synthetic
// (three interleaved spirals) instead of MNIST's files.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <iostream>

struct Spirals : torch::data::datasets::Dataset<Spirals> {
  Spirals(int64_t count, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    labels = torch::randint(0, 3, {count}, gen);
    auto radius = torch::rand({count}, gen);
    auto angle = radius * 4.0 + labels.to(torch::kFloat) * (2.0 * M_PI / 3.0) +
                 torch::randn({count}, gen) * 0.15;
    points = torch::stack({radius * torch::cos(angle), radius * torch::sin(angle)}, 1);
  }
  torch::data::Example<> get(size_t index) override { return {points[index], labels[index]}; }
  torch::optional<size_t> size() const override { return labels.size(0); }
  torch::Tensor points, labels;
};

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(2, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, 3));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x.view({-1, 2})));
    x = torch::relu(fc2->forward(x));
    return torch::log_softmax(fc3->forward(x), /*dim=*/1);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

template <typename DataLoader>
void train(size_t epoch, Net& model, torch::Device device, DataLoader& data_loader,
           torch::optim::Optimizer& optimizer, size_t dataset_size) {
  model.train();
  size_t batch_idx = 0;
  double loss_sum = 0;
  for (auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    auto loss = torch::nll_loss(output, targets);
    AT_ASSERT(!std::isnan(loss.template item<float>()));
    loss.backward();
    optimizer.step();
    loss_sum += loss.template item<double>() * data.size(0);
    if (batch_idx++ % 20 == 0) {
      std::printf("Train Epoch: %zu [%zu batches] Loss: %.4f\n", epoch, batch_idx,
                  loss.template item<float>());
    }
  }
  std::printf("Epoch %zu mean loss: %.4f\n", epoch, loss_sum / dataset_size);
}

template <typename DataLoader>
void test(Net& model, torch::Device device, DataLoader& data_loader, size_t dataset_size) {
  torch::NoGradGuard no_grad;
  model.eval();
  double test_loss = 0;
  int32_t correct = 0;
  for (const auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    auto output = model.forward(data);
    test_loss += torch::nll_loss(output, targets, /*weight=*/{}, torch::Reduction::Sum)
                     .template item<float>();
    auto pred = output.argmax(1);
    correct += pred.eq(targets).sum().template item<int64_t>();
  }
  test_loss /= dataset_size;
  std::printf("\nTest set: Average loss: %.4f | Accuracy: %.3f\n", test_loss,
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

  auto train_dataset = Spirals(1800, 1).map(torch::data::transforms::Stack<>());
  const size_t train_dataset_size = train_dataset.size().value();
  auto train_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(train_dataset), 64);
  auto test_dataset = Spirals(600, 2).map(torch::data::transforms::Stack<>());
  const size_t test_dataset_size = test_dataset.size().value();
  auto test_loader = torch::data::make_data_loader(std::move(test_dataset), 100);

  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));

  for (size_t epoch = 1; epoch <= 5; ++epoch) {
    train(epoch, model, device, *train_loader, optimizer, train_dataset_size);
    test(model, device, *test_loader, test_dataset_size);
  }
}
