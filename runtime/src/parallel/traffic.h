#pragma once

// The bytes tensor and context parallelism move, counted where they are sent, for the benchmark
// (bench/parallelism.cpp) to set against Megatron's and ring attention's counts.

#include <atomic>
#include <cstdint>

namespace accel {
namespace parallel {

struct ParallelTraffic {
  /// Payload of the tensor-parallel collectives: an all-reduce's tensor, an all-gather's input.
  std::atomic<int64_t> tp_bytes{0};
  /// Bytes this process sent around the context-parallel ring: K/V blocks and their gradients.
  std::atomic<int64_t> cp_bytes{0};
};

/// The process's counters.
ParallelTraffic& parallel_traffic();

}  // namespace parallel
}  // namespace accel
