// A siamese network learning which pairs of points share a class: the embedding network runs
// twice per step (once for each side of a pair) before a single backward, and its input
// BatchNorm is frozen (eval mode, running statistics fixed) while the rest trains, as when
// fine-tuning a pretrained encoder.
#include <torch/torch.h>

#include <cstdio>

struct EncoderImpl : torch::nn::Module {
  EncoderImpl()
      : norm(register_module("norm", torch::nn::BatchNorm1d(8))),
        hidden(register_module("hidden", torch::nn::Linear(8, 32))),
        out(register_module("out", torch::nn::Linear(32, 4))) {}

  torch::Tensor forward(torch::Tensor x) {
    return out(torch::tanh(hidden(norm(x))));
  }

  torch::nn::BatchNorm1d norm;
  torch::nn::Linear hidden, out;
};
TORCH_MODULE(Encoder);

// Pairs of points from four Gaussian classes; the target is 1 for a pair from the same class.
class Pairs : public torch::data::datasets::Dataset<Pairs> {
 public:
  Pairs(int64_t count, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto centers = torch::randn({4, 8}, at::make_generator<at::CPUGeneratorImpl>(11)) * 2;
    auto left = torch::randint(0, 4, {count}, gen);
    auto same = torch::rand({count}, gen).lt(0.5);
    auto right = torch::where(same, left, (left + torch::randint(1, 4, {count}, gen)) % 4);
    auto a = centers.index_select(0, left) + torch::randn({count, 8}, gen);
    auto b = centers.index_select(0, right) + torch::randn({count, 8}, gen);
    pairs_ = torch::stack({a, b}, 1);
    labels_ = same.to(torch::kFloat);
  }
  torch::data::Example<> get(size_t i) override { return {pairs_[i], labels_[i]}; }
  torch::optional<size_t> size() const override { return labels_.size(0); }

 private:
  torch::Tensor pairs_, labels_;
};

int main() {
  torch::manual_seed(3);
  Encoder encoder;
  // Frozen statistics: fixed running mean and variance from the start.
  encoder->norm->running_mean.fill_(0.5);
  encoder->norm->running_var.fill_(4.0);
  torch::optim::Adam optimizer(encoder->parameters(), torch::optim::AdamOptions(3e-3));

  auto train = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      Pairs(1536, 1).map(torch::data::transforms::Stack<>()), 48);
  auto test = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      Pairs(400, 2).map(torch::data::transforms::Stack<>()), 64);

  const double margin = 2.0;
  for (int epoch = 1; epoch <= 4; ++epoch) {
    encoder->train();
    encoder->norm->eval();
    double total = 0;
    int64_t pairs = 0;
    for (auto &batch : *train) {
      optimizer.zero_grad();
      auto a = encoder->forward(batch.data.select(1, 0));
      auto b = encoder->forward(batch.data.select(1, 1));
      auto distance = (a - b).pow(2).sum(1).add(1e-9).sqrt();
      auto loss = (batch.target * distance.pow(2) +
                   (1 - batch.target) * torch::relu(margin - distance).pow(2))
                      .mean();
      loss.backward();
      optimizer.step();
      total += loss.item<double>() * batch.target.size(0);
      pairs += batch.target.size(0);
    }
    std::printf("epoch %d: contrastive loss %.4f over %lld pairs\n", epoch, total / pairs,
                static_cast<long long>(pairs));
  }

  torch::NoGradGuard no_grad;
  encoder->eval();
  int64_t right = 0, seen = 0;
  for (auto &batch : *test) {
    auto distance = (encoder->forward(batch.data.select(1, 0)) -
                     encoder->forward(batch.data.select(1, 1)))
                        .norm(2, 1);
    auto predicted = distance.lt(margin / 2).to(torch::kFloat);
    right += predicted.eq(batch.target).sum().item<int64_t>();
    seen += batch.target.size(0);
  }
  std::printf("pair accuracy %.4f on %lld pairs\n", static_cast<double>(right) / seen,
              static_cast<long long>(seen));
}
