// Linear regression on synthetic data, written against libaccel: run it plainly (one process) or
// with `accel launch --num_processes 2 ./train`. Each process reads batches of 16 (or the second
// argument), so two processes train with a global batch of 32: the fit agrees closely, every
// process ends with the same weights, and evaluation counts every test sample exactly once
// either way. It logs through accel's logger (once, from the main process), shows a progress bar
// per epoch, and records the loss per epoch with the JSON-lines tracker under runs/regression/
// (or LOG_DIR).
//   train [EPOCHS [BATCH_SIZE [LOG_DIR]]]

#include <accel/accel.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

// y = 2x + 3 + noise, from a fixed seed, so every process builds the same data set.
class Regression : public torch::data::datasets::Dataset<Regression> {
 public:
  explicit Regression(int64_t length, uint64_t seed) {
    auto generator = torch::make_generator<torch::CPUGeneratorImpl>(seed);
    x_ = torch::randn({length, 1}, generator);
    y_ = 2 * x_ + 3 + 0.1 * torch::randn({length, 1}, generator);
  }
  torch::data::Example<> get(size_t i) override {
    return {x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(x_.size(0)); }

 private:
  torch::Tensor x_, y_;
};

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 5;
  const size_t batch_size = argc > 2 ? static_cast<size_t>(std::atoi(argv[2])) : 16;
  const std::string log_dir = argc > 3 ? argv[3] : "runs";
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().log_with({"jsonl"}).project_config(
          accel::ProjectConfiguration().logging_dir(log_dir)));
  auto logger = accel::get_logger("regression");
  accelerator.init_trackers("regression", {{"learning_rate", 0.1},
                                           {"batch_size", static_cast<int64_t>(batch_size)},
                                           {"epochs", epochs}});

  auto model = torch::nn::Linear(1, 1);
  torch::nn::init::zeros_(model->weight);
  torch::nn::init::zeros_(model->bias);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto train = accelerator.prepare(torch::data::make_data_loader(
      Regression(256, 1).map(torch::data::transforms::Stack<>()), batch_size));
  auto test = accelerator.prepare_data_loader<torch::data::samplers::SequentialSampler>(
      Regression(101, 2).map(torch::data::transforms::Stack<>()), 10);

  logger.info("training on {} processes, {} batches of {} per process and epoch",
              accelerator.num_processes(), train->size(), batch_size);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    auto batches = accel::progress(
        *train, accel::ProgressOptions().description("epoch " + std::to_string(epoch + 1)));
    double epoch_loss = 0;
    for (auto& batch : batches) {
      auto step = accelerator.accumulate(model);
      auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
      accelerator.backward(loss);
      optimizer.step();
      optimizer.zero_grad();
      epoch_loss += loss.item<double>();
      batches.bar().set_postfix({{"loss", loss}});
    }
    batches.bar().close();
    // The mean over every process's batches, logged once by the main process.
    const double mean_loss =
        accelerator.reduce(epoch_loss, accel::Reduction::Mean) / static_cast<double>(train->size());
    accelerator.log({{"train_loss", mean_loss}, {"epoch", epoch}}, epoch);
    logger.info("epoch {}: train loss {:.5f}", epoch + 1, mean_loss);
  }

  torch::NoGradGuard no_grad;
  double squared_error = 0;
  int64_t samples = 0;
  for (auto& batch : *test) {
    auto [prediction, target] =
        accelerator.gather_for_metrics(model->forward(batch.data), batch.target);
    squared_error += (prediction - target).pow(2).sum().item<double>();
    samples += target.size(0);
  }
  char fit[64];
  std::snprintf(fit, sizeof(fit), "weight %.7f bias %.7f", model->weight.item<double>(),
                model->bias.item<double>());
  // Gradients are averaged across the processes, so every process ends with the same weights;
  // without that each would drift its own way on its own shard.
  const auto mine = torch::cat({model->weight.flatten(), model->bias.flatten()}).unsqueeze(0);
  const auto all = accelerator.gather(mine);
  const bool agree = (all - all[0]).abs().max().item<double>() == 0;
  accelerator.print("processes ", accelerator.num_processes(), " ", fit, " ranks agree ",
                    agree ? "yes" : "no");
  accelerator.print("test samples ", samples, " mse ", squared_error / samples);
  accelerator.log({{"test_mse", squared_error / samples}}, epochs);
  accelerator.end_training();
  return 0;
}
