// A stand-in for MNIST that needs no download: 12x12 images of a bright bar whose position
// is the label, with noise. Deterministic for a given seed.
#pragma once

#include <torch/torch.h>

class Digits : public torch::data::datasets::Dataset<Digits> {
 public:
    Digits(int64_t size, uint64_t seed);

    torch::data::Example<> get(size_t index) override;
    torch::optional<size_t> size() const override;

 private:
    torch::Tensor images_, targets_;
};
