// Written for accel (issue 58, item 7): a training loop without a data loader, as many
// tutorials write one: the data set is in memory, and each step slices its batch from the
// tensors by the loop's counter. Migrated, each process takes its share of every batch, so one
// process prints the plain program's numbers and two processes (the same batches, half each)
// print them too, up to the order of the sums.
#include <torch/torch.h>

#include <cstdio>

int main() {
  torch::manual_seed(7);
  const int64_t samples = 480, batch_size = 32;
  auto inputs = torch::randn({samples, 8});
  auto true_weights = torch::randn({8, 1});
  auto targets = inputs.mm(true_weights) + 0.1 * torch::randn({samples, 1});

  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::Tanh(),
                              torch::nn::Linear(16, 1));
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));

  for (int epoch = 1; epoch <= 5; ++epoch) {
    double squared_error = 0;
    int64_t seen = 0;
    for (int64_t start = 0; start < samples; start += batch_size) {
      auto x = inputs.slice(0, start, start + batch_size);
      auto y = targets.slice(0, start, start + batch_size);
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model->forward(x), y);
      loss.backward();
      optimizer.step();
      squared_error += loss.item<double>() * x.size(0);
      seen += x.size(0);
    }
    std::printf("epoch %d mse %.6f over %lld samples\n", epoch, squared_error / seen,
                static_cast<long long>(seen));
  }
}
