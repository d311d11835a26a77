#include "sentiment/reviews.h"

namespace sentiment {

Reviews::Reviews(int64_t count, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  words_ = torch::randint(0, kVocabularySize, {count, kReviewLength},
                          generator, torch::kLong);
  auto positive = words_.lt(50).sum(1);
  auto negative = words_.ge(50).logical_and(words_.lt(100)).sum(1);
  labels_ = positive.gt(negative).to(torch::kLong);
}

torch::data::Example<> Reviews::get(size_t index) {
  return {words_[index], labels_[index]};
}

torch::optional<size_t> Reviews::size() const { return labels_.size(0); }

}  // namespace sentiment
