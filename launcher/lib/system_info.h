#pragma once

// What `accel env` reports and `accel config default` needs to know about this machine.

#include <ostream>
#include <string>

namespace accel {
namespace launcher {

/// NVIDIA GPUs the driver exposes (0 without a driver).
int gpu_count();

/// Writes the report for a bug report: versions, backends, hardware, OS and the active config.
/// `selfcheck` (accel-selfcheck, linked against LibTorch) is asked whether CUDA is available.
void print_environment(std::ostream& out, const std::string& config_path,
                       const std::string& selfcheck);

}  // namespace launcher
}  // namespace accel
