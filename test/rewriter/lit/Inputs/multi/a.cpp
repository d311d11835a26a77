#include "common.h"
int main() { train_step(torch::ones({1}, torch::requires_grad()).sum()); }
