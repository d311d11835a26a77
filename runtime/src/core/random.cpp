#include <accel/random.h>

#include "distributed/environment.h"

#include <ATen/Context.h>
#include <torch/utils.h>

#include <cstdlib>

namespace accel {

void set_seed(uint64_t seed, bool device_specific, bool deterministic) {
  if (device_specific) {
    seed += static_cast<uint64_t>(
        distributed::detect_process_identity(distributed::process_environment()).rank);
  }
  torch::manual_seed(seed);  // the CPU generator and, when CUDA is there, every device's
  std::srand(static_cast<unsigned>(seed));
  if (deterministic) {
    // cuBLAS is deterministic only with a fixed workspace; it reads this when it starts.
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }
}

}  // namespace accel
