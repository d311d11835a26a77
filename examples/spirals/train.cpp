// A plain single-GPU LibTorch program with the parts a longer training script has: a random
// sampler, an LR scheduler, gradient clipping by value, a Sequential model held by its holder,
// a device picked as cuda:0 when there is one, and the model saved with torch::save at the end.
// accel-migrate turns it into a libaccel program (the end-to-end test migrates, builds and
// launches it).
//
// The data is synthetic: two interleaved spirals, from fixed seeds.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>

// Points on two spirals, labelled by spiral, with a little noise.
class Spirals : public torch::data::datasets::Dataset<Spirals> {
public:
  Spirals(int64_t size, uint64_t seed) {
    torch::manual_seed(seed);
    labels_ = torch::randint(0, 2, {size}, torch::kLong);
    const auto t = torch::rand({size}) * 3 * M_PI + 0.5;
    const auto phase = labels_.to(torch::kFloat) * M_PI;
    points_ = torch::stack({t * torch::cos(t + phase), t * torch::sin(t + phase)}, 1) / 5 +
              0.05 * torch::randn({size, 2});
  }
  torch::data::Example<> get(size_t index) override {
    return {points_[index], labels_[index]};
  }
  torch::optional<size_t> size() const override { return points_.size(0); }

private:
  torch::Tensor points_, labels_;
};

int main() {
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0)
                                                     : torch::Device(torch::kCPU);
  auto train_set = Spirals(1200, 11).map(torch::data::transforms::Stack<>());
  auto test_set = Spirals(301, 12).map(torch::data::transforms::Stack<>());
  const size_t test_size = test_set.size().value();

  torch::manual_seed(5);
  torch::nn::Sequential model(torch::nn::Linear(2, 64), torch::nn::ReLU(), torch::nn::Linear(64, 64),
                              torch::nn::ReLU(), torch::nn::Linear(64, 2));
  model->to(device);

  auto train_loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      std::move(train_set), torch::data::DataLoaderOptions().batch_size(40));
  auto test_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(test_set), 64);

  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.01));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/10, /*gamma=*/0.5);

  for (int epoch = 1; epoch <= 30; ++epoch) {
    double epoch_loss = 0;
    for (auto& batch : *train_loader) {
      auto data = batch.data.to(device);
      auto target = batch.target.to(device);
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model->forward(data), target);
      loss.backward();
      torch::nn::utils::clip_grad_value_(model->parameters(), 1.0);
      optimizer.step();
      epoch_loss += loss.item<double>();
    }
    scheduler.step();
    if (epoch % 10 == 0) std::printf("epoch %d loss %.4f\n", epoch, epoch_loss);
  }

  torch::NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0, total = 0;
  for (const auto& batch : *test_loader) {
    auto data = batch.data.to(device);
    auto target = batch.target.to(device);
    auto pred = model->forward(data).argmax(1);
    correct += pred.eq(target).sum().item<int64_t>();
    total += target.size(0);
  }
  std::printf("test: seen %lld of %zu, accuracy %.4f\n", static_cast<long long>(total), test_size,
              static_cast<double>(correct) / static_cast<double>(total));
  torch::save(model, "spirals_model.pt");
  std::printf("done\n");
}
