// A plain single-GPU LibTorch program of another shape: no data loader, the whole data set is one
// tensor on the device, and training is a `while` loop that stops on a step budget or a loss
// target. The model is held by std::shared_ptr. accel-migrate turns it into a libaccel program
// (the end-to-end test migrates, builds and launches it).
//
// The data is synthetic: y = sin(3x) plus a little noise, from a fixed seed.
#include <torch/torch.h>

#include <iostream>
#include <memory>

struct Mlp : torch::nn::Module {
  Mlp() {
    hidden = register_module("hidden", torch::nn::Linear(1, 32));
    out = register_module("out", torch::nn::Linear(32, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return out->forward(torch::tanh(hidden->forward(x))); }
  torch::nn::Linear hidden{nullptr}, out{nullptr};
};

int main() {
  torch::manual_seed(0);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  auto x = torch::linspace(-2, 2, 400).unsqueeze(1);
  auto y = torch::sin(3 * x) + 0.05 * torch::randn({400, 1});
  x = x.to(device);
  y = y.to(device);

  auto model = std::make_shared<Mlp>();
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.02));

  int step = 0;
  double last_loss = 1e9;
  while (step < 400 && last_loss > 1e-3) {
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    optimizer.step();
    last_loss = loss.item<double>();
    if (step % 100 == 0) std::cout << "step " << step << " loss " << last_loss << std::endl;
    ++step;
  }

  torch::NoGradGuard no_grad;
  auto grid = torch::linspace(-2, 2, 101).unsqueeze(1).to(device);
  const double error = (model->forward(grid) - torch::sin(3 * grid)).pow(2).mean().item<double>();
  std::cout << "test: samples " << grid.size(0) << " mse " << error << std::endl;
  std::cout << "done after " << step << " steps" << std::endl;
}
