#pragma once

// The kernels tensor-parallel slices reach under kTensorParallelDispatchKey: see
// tensor_parallel.h.

namespace accel {
namespace detail {

/// Registers the kernels and the key's fallthrough, once per process.
void register_tp_kernels();

}  // namespace detail
}  // namespace accel
