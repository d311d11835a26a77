#include "checkpoint.h"

int main() {
  accel::Accelerator accelerator;
  torch::nn::Linear model(4, 1);
  accelerator.prepare(model);
  if (accelerator.is_main_process()) {
    report(accelerator, 1.0);
    save_checkpoint(accelerator, "checkpoints/last");
  }
  return 0;
}
