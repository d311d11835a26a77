#include "memory_estimate.h"

#include "accel_common/progress_bar.h"
#include "accel_common/safetensors_header.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>

namespace accel {
namespace launcher {

MemoryEstimate estimate_memory(double p, const std::string& precision, int processes) {
  const double n = processes;
  if (precision == "fp32") {
    // 4 bytes of weights, 4 of gradients, 8 of Adam moments per parameter.
    return {4 * p, 16 * p, 8 * p + 8 * p / n, 4 * p + 12 * p / n, 16 * p / n};
  }
  // Mixed precision: 2 + 2 bytes of half weights and gradients, 12 of fp32 master weights and
  // Adam moments.
  return {2 * p, 16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n};
}

std::optional<double> parse_parameter_count(const std::string& text) {
  if (text.empty()) return std::nullopt;
  double scale = 1;
  std::string number = text;
  const char last = text.back();
  if (last == 'k' || last == 'K') scale = 1e3;
  if (last == 'm' || last == 'M') scale = 1e6;
  if (last == 'b' || last == 'B' || last == 'g' || last == 'G') scale = 1e9;
  if (last == 't' || last == 'T') scale = 1e12;
  if (scale != 1) number.pop_back();
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(number, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != number.size() || !(value > 0) || !std::isfinite(value)) return std::nullopt;
  return value * scale;
}

double count_parameters(const std::string& path) {
  const bool index = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  const auto files = index ? detail::read_safetensors_index(path) : std::vector<std::string>{path};
  // Reading many shards' headers from a network filesystem takes a while: a bar on a terminal.
  progress_bar::Renderer::Settings bar;
  bar.description = "reading headers";
  bar.total = static_cast<int64_t>(files.size());
  bar.unit = "file";
  bar.enabled = files.size() > 1 && ::isatty(STDERR_FILENO) == 1;
  progress_bar::Renderer headers(bar);
  double total = 0;
  for (const auto& file : files) {
    headers.update();
    for (const auto& t : detail::read_safetensors_header(file).tensors) {
      total += static_cast<double>(t.second.numel());
    }
  }
  return total;
}

namespace {

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(unit == 0 ? 0 : 2) << bytes << " " << units[unit];
  return out.str();
}

}  // namespace

void print_estimates(std::ostream& out, double parameters, int processes) {
  out << "Memory per process for " << std::setprecision(4) << parameters / 1e9 << "B parameters on "
      << processes << " process" << (processes == 1 ? "" : "es")
      << " (weights, gradients and Adam states; activations not included)\n\n";
  const int w = 13;
  out << std::left << std::setw(8) << "dtype" << std::right << std::setw(w) << "inference"
      << std::setw(w) << "train DP" << std::setw(w) << "stage 1" << std::setw(w) << "stage 2"
      << std::setw(w) << "stage 3"
      << "\n";
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    const auto e = estimate_memory(parameters, precision, processes);
    out << std::left << std::setw(8) << precision << std::right << std::setw(w)
        << human(e.inference) << std::setw(w) << human(e.data_parallel) << std::setw(w)
        << human(e.stage1) << std::setw(w) << human(e.stage2) << std::setw(w) << human(e.stage3)
        << "\n";
  }
}

}  // namespace launcher
}  // namespace accel
