#include <torch/torch.h>

int main() {
  torch::nn::Linear model(4, 2);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int i = 0; i < 3; ++i) {
    auto loss = model->forward(torch::ones({8, 4})).sum();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
}
