#pragma once
#include <torch/torch.h>
#include <accel/accel.h>

void save_checkpoint(accel::Accelerator &accelerator, const std::string &dir);
void report(accel::Accelerator &accelerator, double loss);
