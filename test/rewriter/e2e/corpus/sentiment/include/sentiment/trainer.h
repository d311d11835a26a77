// A bag-of-words classifier and the object that trains it: the model and its
// optimizer are members, built by the constructor in trainer.cpp.
#ifndef SENTIMENT_TRAINER_H_
#define SENTIMENT_TRAINER_H_

#include <torch/torch.h>

namespace sentiment {

struct BagOfWordsImpl : torch::nn::Module {
  BagOfWordsImpl(int64_t vocabulary, int64_t dimension);
  torch::Tensor forward(const torch::Tensor& words);

  torch::nn::Embedding embedding{nullptr};
  torch::nn::Linear classifier{nullptr};
};
TORCH_MODULE(BagOfWords);

class Trainer {
 public:
  Trainer(int64_t vocabulary, int64_t dimension, double learning_rate);

  // One optimizer step on a batch; returns the batch's mean loss.
  torch::Tensor Step(const torch::Tensor& words, const torch::Tensor& labels);
  // The predicted class of each review.
  torch::Tensor Predict(const torch::Tensor& words);

 private:
  BagOfWords model_;
  torch::optim::Adam optimizer_;
};

}  // namespace sentiment

#endif  // SENTIMENT_TRAINER_H_
