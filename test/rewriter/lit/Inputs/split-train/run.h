#pragma once
#include "model.h"
void run(ConvNet &model, int epochs);
