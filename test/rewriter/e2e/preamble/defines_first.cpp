// A macro before the first include may change what the headers mean: no preamble at all.
#define _USE_MATH_DEFINES
#include <cstdio>
#include <torch/torch.h>

int main() {
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  torch::nn::Sequential net(torch::nn::Linear(3, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
  net->to(device);
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-2));
  const auto x = torch::linspace(-M_PI, M_PI, 24).reshape({8, 3}).to(device);
  for (int epoch = 0; epoch < 4; ++epoch) {
    adam.zero_grad();
    torch::Tensor loss = torch::mse_loss(net->forward(x), torch::sin(x).sum(1, true));
    loss.backward();
    adam.step();
  }
  std::printf("done\n");
}
