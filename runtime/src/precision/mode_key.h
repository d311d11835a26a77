#pragma once

// accel's thread-local modes, and the kernels of the dispatch key they include
// (kModeDispatchKey): FP8 Linears (fp8_kernels.cpp, called directly) and a checkpointed block's
// matmuls recorded in its forward or replayed in its recompute (core/matmul_replay.cpp, which
// registers its routes: core is above precision). The key is in this thread's included keys
// while any mode is on; its kernels (linear, addmm, matmul, mm, bmm) take the FP8 path under
// Mode::Fp8, the matmul routes while a record or a replay is on, and otherwise pass the operator
// on below the key.

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <cstdint>
#include <functional>
#include <optional>

namespace accel {
namespace precision {

enum class Mode : uint8_t {
  Fp8 = 1,
  RecordMatmuls = 2,
  ReplayMatmuls = 4,
};

bool mode_on(Mode mode);
/// Turns `mode` on or off on this thread (registering the kernels on first use); returns whether
/// it was on.
bool set_mode(Mode mode, bool on);

/// The operator computed below the key, as if no mode were on.
using Compute = std::function<at::Tensor()>;

/// Under Mode::RecordMatmuls or Mode::ReplayMatmuls: the matmul's output, recorded or replayed.
/// Their owner (core's activation checkpointing) registers them before it first turns a mode on.
struct MatmulRoutes {
  at::Tensor (*mm)(const at::Tensor& self, const at::Tensor& mat2,
                   const Compute& compute) = nullptr;
  at::Tensor (*bmm)(const at::Tensor& self, const at::Tensor& mat2,
                    const Compute& compute) = nullptr;
  at::Tensor (*addmm)(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                      const c10::Scalar& beta, const c10::Scalar& alpha,
                      const Compute& compute) = nullptr;
};
void set_matmul_routes(const MatmulRoutes& routes);

}  // namespace precision
}  // namespace accel
