#pragma once

// `accel estimate-memory`: per-process memory for a model's weights, gradients and Adam states
// (ZeRO's accounting; activations are not included).

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace accel {
namespace launcher {

struct MemoryEstimate {
  double inference;      // the weights alone
  double data_parallel;  // training, every process holds everything
  double stage1;         // optimizer states sharded
  double stage2;         // ... and gradients
  double stage3;         // ... and parameters
};

/// Bytes per process for `parameters` trained with Adam on `processes` processes, for
/// precision "fp32", "bf16" or "fp16". Mixed precision keeps 2 + 2 bytes of half-precision
/// weights and gradients and 12 bytes of fp32 master weights and Adam moments per parameter.
MemoryEstimate estimate_memory(double parameters, const std::string& precision, int processes);

/// "7e9", "7B", "125M", "350k", "1000" -> parameter count; nullopt when it is not a count.
std::optional<double> parse_parameter_count(const std::string& text);

/// Parameters in a safetensors file or a sharded model.safetensors.index.json. Throws
/// accel::detail::SafetensorsError naming the file.
double count_parameters(const std::string& path);

/// The table `accel estimate-memory` prints.
void print_estimates(std::ostream& out, double parameters, int processes);

}  // namespace launcher
}  // namespace accel
