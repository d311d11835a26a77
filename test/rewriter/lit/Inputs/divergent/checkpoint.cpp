#include "checkpoint.h"

void save_checkpoint(accel::Accelerator &accelerator, const std::string &dir) {
  accelerator.wait_for_everyone();
  accelerator.save_state(dir);
}

void report(accel::Accelerator &accelerator, double loss) { accelerator.print("loss ", loss); }
