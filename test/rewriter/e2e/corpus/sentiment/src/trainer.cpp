#include "sentiment/trainer.h"

namespace sentiment {

BagOfWordsImpl::BagOfWordsImpl(int64_t vocabulary, int64_t dimension)
    : embedding(register_module(
          "embedding", torch::nn::Embedding(vocabulary, dimension))),
      classifier(register_module("classifier",
                                 torch::nn::Linear(dimension, 2))) {}

torch::Tensor BagOfWordsImpl::forward(const torch::Tensor& words) {
  return classifier(embedding(words).mean(1));
}

Trainer::Trainer(int64_t vocabulary, int64_t dimension, double learning_rate)
    : model_(vocabulary, dimension),
      optimizer_(model_->parameters(),
                 torch::optim::AdamOptions(learning_rate)) {}

torch::Tensor Trainer::Step(const torch::Tensor& words,
                            const torch::Tensor& labels) {
  model_->train();
  optimizer_.zero_grad();
  auto loss = torch::nn::functional::cross_entropy(model_(words), labels);
  loss.backward();
  optimizer_.step();
  return loss.detach();
}

torch::Tensor Trainer::Predict(const torch::Tensor& words) {
  torch::NoGradGuard no_grad;
  model_->eval();
  return model_(words).argmax(1);
}

}  // namespace sentiment
