#pragma once

// Timing helpers shared by the benchmarks: medians of interleaved repetitions, so a noisy machine
// moves baseline and candidate alike.

#include <algorithm>
#include <chrono>
#include <vector>

namespace accel_bench {

template <typename Fn>
double seconds(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace accel_bench
