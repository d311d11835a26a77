// LibTorch opens the file; a conditional block after it ends the preamble there.
#include <torch/torch.h>
#if defined(__linux__)
#include <cstdio>
#else
#include <stdio.h>
#endif

int main() {
  torch::Device device(torch::kCUDA, 0);
  torch::nn::Linear model(4, 1);
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    auto x = torch::randn({8, 4}).to(device);
    optimizer.zero_grad();
    auto loss = model->forward(x).pow(2).mean();
    loss.backward();
    optimizer.step();
    std::printf("loss %f\n", loss.item<float>());
  }
}
