// Synthetic "reviews": sequences of word ids. Words 0-49 are positive, 50-99
// negative, the rest neutral; a review is positive when it has more positive
// than negative words.
#ifndef SENTIMENT_REVIEWS_H_
#define SENTIMENT_REVIEWS_H_

#include <torch/torch.h>

#include <cstdint>

namespace sentiment {

constexpr int64_t kVocabularySize = 400;
constexpr int64_t kReviewLength = 16;

class Reviews : public torch::data::datasets::Dataset<Reviews> {
 public:
  Reviews(int64_t count, uint64_t seed);

  torch::data::Example<> get(size_t index) override;
  torch::optional<size_t> size() const override;

 private:
  torch::Tensor words_;
  torch::Tensor labels_;
};

}  // namespace sentiment

#endif  // SENTIMENT_REVIEWS_H_
