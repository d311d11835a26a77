#pragma once

// accel's thread-local modes, and the kernels of the dispatch key they include
// (kModeDispatchKey): FP8 Linears (precision/fp8_kernels.cpp) and a checkpointed block's matmuls
// recorded in its forward or replayed in its recompute (core/matmul_replay.cpp). The key is in
// this thread's included keys while any mode is on; its kernels (linear, addmm, matmul, mm, bmm)
// ask the routes of the modes that are on, and otherwise pass the operator on below the key.
// Each mode's owner sets its routes before it first turns the mode on.

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <cstdint>
#include <functional>
#include <optional>

namespace accel {
namespace util {

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

/// Under Mode::Fp8: the FP8 result of a converted Linear's operator, none for another. Called
/// with the key excluded.
struct Fp8Routes {
  std::optional<at::Tensor> (*linear)(const at::Tensor& input, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias) = nullptr;
  std::optional<at::Tensor> (*addmm)(const at::Tensor& self, const at::Tensor& mat1,
                                     const at::Tensor& mat2, const c10::Scalar& beta,
                                     const c10::Scalar& alpha) = nullptr;
  std::optional<at::Tensor> (*matmul)(const at::Tensor& self, const at::Tensor& other) = nullptr;
};
void set_fp8_routes(const Fp8Routes& routes);

/// Under Mode::RecordMatmuls or Mode::ReplayMatmuls: the matmul's output, recorded or replayed.
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

}  // namespace util
}  // namespace accel
