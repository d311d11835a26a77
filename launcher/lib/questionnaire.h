#pragma once

// `accel config`: asks the questions Accelerate's `accelerate config` asks (for what accel
// supports) and builds a Config from the answers.

#include "config.h"

#include <istream>
#include <ostream>

namespace accel {
namespace launcher {

/// Asks on `out`, reads answers line by line from `in`; an empty answer takes the default shown.
/// A bad answer is explained and asked again. Throws ConfigError when `in` ends early.
Config ask_config(std::istream& in, std::ostream& out);

/// The file `accel config default` writes: one process per GPU where there are GPUs, else one
/// CPU process.
Config default_config(int gpu_count);

}  // namespace launcher
}  // namespace accel
