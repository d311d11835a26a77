#include "train.h"
double train(ConvNet& model, int epochs) {
  torch::optim::Adam optimizer(model->parameters(), 1e-2);
  torch::manual_seed(3);
  auto x = torch::randn({64, 4});
  auto y = (x.sum(1) > 0).to(torch::kLong);
  double last = 0;
  for (int e = 0; e < epochs; ++e) {
    optimizer.zero_grad();
    auto loss = torch::cross_entropy_loss(model->forward(x), y);
    loss.backward();
    optimizer.step();
    last = loss.item<double>();
  }
  torch::save(model, "best.pt");
  return last;
}
