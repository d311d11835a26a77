#pragma once

// The kernels tensor-parallel slices reach under kTensorParallelDispatchKey: see
// tensor_parallel.h.

namespace accel {
namespace parallel {

/// Registers the kernels and the key's fallthrough, once per process.
void register_tp_kernels();

}  // namespace parallel
}  // namespace accel
