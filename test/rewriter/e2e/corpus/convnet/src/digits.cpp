#include "digits.h"

Digits::Digits(int64_t size, uint64_t seed) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    targets_ = torch::randint(0, 10, {size}, generator, torch::kLong);
    images_ = torch::randn({size, 1, 12, 12}, generator) * 0.8;
    for (int64_t i = 0; i < size; ++i) {
        int64_t label = targets_[i].item<int64_t>();
        images_[i][0].select(0, label % 12).add_(1.5);
        images_[i][0].select(1, (label * 5) % 12).add_(1.0);
    }
}

torch::data::Example<> Digits::get(size_t index) {
    return {images_[index], targets_[index]};
}

torch::optional<size_t> Digits::size() const {
    return images_.size(0);
}
