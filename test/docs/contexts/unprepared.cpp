// A program with a model and a data set but no Accelerator yet, for a snippet that makes its own:
// `model`, `make_dataset()` (x -> 2x + 1, stacked into batches), `epochs`, `lr`.
#include <accel/accel.h>
#include <torch/torch.h>

#include <utility>

class Line : public torch::data::datasets::Dataset<Line> {
 public:
  Line() : x_(torch::rand({256, 1})), y_(2 * x_ + 1) {}
  torch::data::Example<> get(size_t i) override {
    return {x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(x_.size(0)); }

 private:
  torch::Tensor x_, y_;
};

inline auto make_dataset() { return Line().map(torch::data::transforms::Stack<>()); }

int main() {
  torch::nn::Sequential model(torch::nn::Linear(1, 1));
  const int epochs = 3;
  const double lr = 1e-2;
  // @snippet
  return 0;
}
