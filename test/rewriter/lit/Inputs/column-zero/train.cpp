#include <torch/torch.h>

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    optimizer.zero_grad();
    auto loss = model(torch::ones({2, 4})).sum() + model(torch::zeros({2, 4})).sum();
loss.backward();
    optimizer.step();
  }
}
