#include "train.h"
#include <iostream>
int main() {
  torch::manual_seed(0);
  ConvNet model;
  std::cout << "loss " << train(model, 20) << "\n";
  torch::load(model, "best.pt");
  std::cout << "done\n";
}
