// A small GAN in the style of the LibTorch DCGAN example: two models with BatchNorm, two Adam
// optimizers, the discriminator run on real and on fake samples before its step, a loader with
// worker threads, and progress printed with printf. The "images" are points on a ring.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>

// The number of points to generate per batch.
const int64_t kNoiseSize = 8;
const int64_t kBatchSize = 50;
const int64_t kNumberOfEpochs = 4;
const int64_t kLogInterval = 10;

struct RingDataset : torch::data::datasets::Dataset<RingDataset> {
  explicit RingDataset(int64_t count) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    auto angle = torch::rand({count}, gen) * 2 * M_PI;
    points_ = torch::stack({torch::cos(angle), torch::sin(angle)}, 1) +
              0.05 * torch::randn({count, 2}, gen);
  }
  torch::data::Example<> get(size_t index) override {
    return {points_[index], torch::ones({1})};
  }
  torch::optional<size_t> size() const override { return points_.size(0); }

  torch::Tensor points_;
};

int main(int argc, const char* argv[]) {
  torch::manual_seed(1);

  // Create the device we pass around based on whether CUDA is available.
  torch::Device device(torch::kCPU);
  if (torch::cuda::is_available()) {
    std::printf("CUDA is available! Training on GPU.\n");
    device = torch::Device(torch::kCUDA);
  }

  torch::nn::Sequential generator(
      torch::nn::Linear(kNoiseSize, 32),
      torch::nn::BatchNorm1d(32),
      torch::nn::ReLU(),
      torch::nn::Linear(32, 2));
  generator->to(device);

  torch::nn::Sequential discriminator(
      torch::nn::Linear(2, 32),
      torch::nn::BatchNorm1d(32),
      torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
      torch::nn::Linear(32, 1),
      torch::nn::Sigmoid());
  discriminator->to(device);

  auto dataset = RingDataset(1000).map(torch::data::transforms::Stack<>());
  const int64_t batches_per_epoch =
      std::ceil(dataset.size().value() / static_cast<double>(kBatchSize));

  auto data_loader = torch::data::make_data_loader(
      std::move(dataset),
      torch::data::DataLoaderOptions().batch_size(kBatchSize).workers(2));

  torch::optim::Adam generator_optimizer(
      generator->parameters(), torch::optim::AdamOptions(2e-3).betas({0.5, 0.999}));
  torch::optim::Adam discriminator_optimizer(
      discriminator->parameters(), torch::optim::AdamOptions(2e-3).betas({0.5, 0.999}));

  for (int64_t epoch = 1; epoch <= kNumberOfEpochs; ++epoch) {
    int64_t batch_index = 0;
    int64_t samples = 0;
    for (torch::data::Example<>& batch : *data_loader) {
      // Train discriminator with real points.
      discriminator->zero_grad();
      torch::Tensor real_points = batch.data.to(device);
      torch::Tensor real_labels =
          torch::empty(batch.data.size(0), device).uniform_(0.8, 1.0);
      torch::Tensor real_output = discriminator->forward(real_points).reshape(real_labels.sizes());
      torch::Tensor d_loss_real =
          torch::binary_cross_entropy(real_output, real_labels);
      d_loss_real.backward();

      // Train discriminator with fake points.
      torch::Tensor noise =
          torch::randn({batch.data.size(0), kNoiseSize}, device);
      torch::Tensor fake_points = generator->forward(noise);
      torch::Tensor fake_labels = torch::zeros(batch.data.size(0), device);
      torch::Tensor fake_output = discriminator->forward(fake_points.detach()).reshape(fake_labels.sizes());
      torch::Tensor d_loss_fake =
          torch::binary_cross_entropy(fake_output, fake_labels);
      d_loss_fake.backward();

      torch::Tensor d_loss = d_loss_real + d_loss_fake;
      discriminator_optimizer.step();

      // Train generator.
      generator->zero_grad();
      fake_labels.fill_(1);
      fake_output = discriminator->forward(fake_points).reshape(fake_labels.sizes());
      torch::Tensor g_loss =
          torch::binary_cross_entropy(fake_output, fake_labels);
      g_loss.backward();
      generator_optimizer.step();

      samples += batch.data.size(0);
      batch_index++;
      if (batch_index % kLogInterval == 0) {
        std::printf(
            "[%2ld/%2ld][%3ld/%3ld] D_loss: %.4f | G_loss: %.4f\n",
            epoch,
            kNumberOfEpochs,
            batch_index,
            batches_per_epoch,
            d_loss.item<float>(),
            g_loss.item<float>());
      }
    }
    std::printf("epoch %ld: trained on %ld points\n", epoch, samples);
  }

  // How far generated points are from the ring (radius 1): a GAN that learned says near 0.
  generator->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor generated = generator->forward(torch::randn({500, kNoiseSize}, device));
  std::printf("mean distance from the ring %.4f\n",
              (generated.norm(2, 1) - 1).abs().mean().item<float>());
  (void)argc;
  (void)argv;
}
