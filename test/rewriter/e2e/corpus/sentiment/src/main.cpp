// Trains the sentiment classifier for a few epochs, printing the training loss
// and accuracy of each epoch and the test accuracy at the end.
#include <torch/torch.h>

#include <iomanip>
#include <iostream>
#include <memory>

#include "sentiment/reviews.h"
#include "sentiment/trainer.h"

int main() {
  torch::manual_seed(7);
  const int64_t kTrainSize = 2048;
  auto train_loader = torch::data::make_data_loader<
      torch::data::samplers::RandomSampler>(
      sentiment::Reviews(kTrainSize, 1).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(64));
  auto test_loader = torch::data::make_data_loader(
      sentiment::Reviews(512, 2).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(100));

  auto trainer = std::make_unique<sentiment::Trainer>(
      sentiment::kVocabularySize, 32, 1e-2);

  std::cout << std::fixed << std::setprecision(4);
  for (int epoch = 1; epoch <= 4; ++epoch) {
    torch::Tensor loss_sum = torch::zeros({});
    torch::Tensor correct = torch::zeros({}, torch::kLong);
    for (auto& batch : *train_loader) {
      auto loss = trainer->Step(batch.data, batch.target);
      loss_sum += loss * batch.data.size(0);
      correct += trainer->Predict(batch.data).eq(batch.target).sum();
    }
    std::cout << "epoch " << epoch << ": training loss "
              << loss_sum.item<double>() / kTrainSize << ", accuracy "
              << correct.item<double>() / kTrainSize << std::endl;
  }

  int64_t right = 0, seen = 0;
  for (const auto& batch : *test_loader) {
    auto predicted = trainer->Predict(batch.data);
    right += predicted.eq(batch.target).sum().item<int64_t>();
    seen += predicted.size(0);
  }
  std::cout << "test accuracy " << static_cast<double>(right) / seen << " on "
            << seen << " reviews" << std::endl;
}
