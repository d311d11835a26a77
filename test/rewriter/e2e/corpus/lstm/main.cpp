/*
 * Sequence classification with an LSTM: is the running sum of a noisy sequence ever above a
 * threshold? Written in the style of the LibTorch forum examples: two-space indent, `auto &x`,
 * the model built before its loaders, metrics kept as tensors until the end of the epoch.
 */
#include <torch/torch.h>

#include <cstdio>

struct SequenceNet : torch::nn::Module {
  SequenceNet(int64_t hidden) {
    lstm = register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(1, hidden).batch_first(true)));
    head = register_module("head", torch::nn::Linear(hidden, 2));
  }

  torch::Tensor forward(const torch::Tensor &x) {
    auto out = std::get<0>(lstm->forward(x));
    return head->forward(out.select(1, -1));
  }

  torch::nn::LSTM lstm{nullptr};
  torch::nn::Linear head{nullptr};
};

class Sequences : public torch::data::datasets::Dataset<Sequences> {
 public:
  Sequences(int64_t count, int64_t length, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    inputs_ = torch::randn({count, length, 1}, gen);
    labels_ = (inputs_.cumsum(1).amax({1, 2}) > 2.0).to(torch::kLong);
  }
  torch::data::Example<> get(size_t i) override { return {inputs_[i], labels_[i]}; }
  torch::optional<size_t> size() const override { return inputs_.size(0); }

 private:
  torch::Tensor inputs_, labels_;
};

template <typename Loader>
static void evaluate(SequenceNet &net, torch::Device device, int64_t epoch, Loader &loader) {
  torch::NoGradGuard guard;
  net.eval();
  auto correct = torch::zeros({}, torch::kLong);
  auto seen = torch::zeros({}, torch::kLong);
  for (auto &batch : loader) {
    auto inputs = batch.data.to(device);
    auto labels = batch.target.to(device);
    auto logits = net.forward(inputs);
    correct += logits.argmax(1).eq(labels).sum();
    seen += labels.numel();
  }
  std::printf("epoch %lld: validation accuracy %.4f over %lld sequences\n",
              static_cast<long long>(epoch),
              correct.item<double>() / seen.item<double>(),
              static_cast<long long>(seen.item<int64_t>()));
}

int main() {
  torch::manual_seed(3);
  torch::Device device = torch::kCPU;
  if (torch::cuda::is_available()) device = torch::Device(torch::kCUDA, 0);

  SequenceNet net(16);
  net.to(device);
  torch::optim::Adam opt(net.parameters(), torch::optim::AdamOptions(5e-3));

  auto train = torch::data::make_data_loader(
      Sequences(512, 12, 11).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(32));
  auto valid = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      Sequences(150, 12, 12).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(40));

  for (int64_t epoch = 1; epoch <= 4; ++epoch) {
    net.train();
    auto loss_sum = torch::zeros({});
    int64_t batches = 0;
    for (auto &batch : *train) {
      auto inputs = batch.data.to(device);
      auto labels = batch.target.to(device);
      opt.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(net.forward(inputs), labels);
      loss.backward();
      opt.step();
      loss_sum += loss.detach();
      ++batches;
    }
    std::printf("epoch %lld: mean training loss %.4f\n", static_cast<long long>(epoch),
                loss_sum.item<double>() / batches);
    evaluate(net, device, epoch, *valid);
  }
  return 0;
}
