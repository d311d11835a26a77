// The thread's modes, kModeDispatchKey's inclusion and its kernels: see mode_key.h.

#include "mode_key.h"

#include "fp8_linear.h"
#include "util/dispatch_registration.h"
#include "util/torch_compat.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <atomic>
#include <mutex>

namespace accel {
namespace precision {
namespace {

using util::kModeDispatchKey;

thread_local uint8_t t_modes = 0;

// Set once by core's activation checkpointing before a record or replay is first on; read by
// every thread's kernels.
MatmulRoutes g_matmul_routes;
std::atomic<bool> g_matmul_routes_set{false};

bool recording_or_replaying() {
  return mode_on(Mode::RecordMatmuls) || mode_on(Mode::ReplayMatmuls);
}

/// `keys` without kModeDispatchKey and the keys above it: the operator's next kernel.
c10::DispatchKeySet below(c10::DispatchKeySet keys) {
  return keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kModeDispatchKey);
}

using Excluded = c10::impl::ExcludeDispatchKeyGuard;

at::Tensor linear_kernel(c10::DispatchKeySet keys, const at::Tensor& input,
                         const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  if (mode_on(Mode::Fp8)) {
    Excluded plain(kModeDispatchKey);
    if (auto out = fp8_route_linear(input, weight, bias)) return *std::move(out);
  }
  // A composite: the matmuls it decomposes into come back to this key's kernels.
  return at::_ops::linear::redispatch(below(keys), input, weight, bias);
}

at::Tensor matmul_kernel(c10::DispatchKeySet keys, const at::Tensor& self,
                         const at::Tensor& other) {
  if (mode_on(Mode::Fp8)) {
    Excluded plain(kModeDispatchKey);
    if (auto out = fp8_route_matmul(self, other)) return *std::move(out);
  }
  return at::_ops::matmul::redispatch(below(keys), self, other);
}

at::Tensor addmm_kernel(c10::DispatchKeySet keys, const at::Tensor& self, const at::Tensor& mat1,
                        const at::Tensor& mat2, const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (mode_on(Mode::Fp8)) {
    Excluded plain(kModeDispatchKey);
    if (auto out = fp8_route_addmm(self, mat1, mat2, beta, alpha)) return *std::move(out);
  }
  const auto compute = [&] {
    return at::_ops::addmm::redispatch(below(keys), self, mat1, mat2, beta, alpha);
  };
  if (recording_or_replaying() && g_matmul_routes_set) {
    return g_matmul_routes.addmm(self, mat1, mat2, beta, alpha, compute);
  }
  return compute();
}

at::Tensor mm_kernel(c10::DispatchKeySet keys, const at::Tensor& self, const at::Tensor& mat2) {
  const auto compute = [&] { return at::_ops::mm::redispatch(below(keys), self, mat2); };
  if (recording_or_replaying() && g_matmul_routes_set) {
    return g_matmul_routes.mm(self, mat2, compute);
  }
  return compute();
}

at::Tensor bmm_kernel(c10::DispatchKeySet keys, const at::Tensor& self, const at::Tensor& mat2) {
  const auto compute = [&] { return at::_ops::bmm::redispatch(below(keys), self, mat2); };
  if (recording_or_replaying() && g_matmul_routes_set) {
    return g_matmul_routes.bmm(self, mat2, compute);
  }
  return compute();
}

void register_mode_kernels() {
  static const bool registered = [] {
    util::register_borrowed_key(kModeDispatchKey,
                                "FP8 training and activation checkpointing's matmuls",
                                torch::CppFunction::makeFallthrough(), [](torch::Library& aten) {
                                  aten.impl("linear", TORCH_FN(linear_kernel));
                                  aten.impl("matmul", TORCH_FN(matmul_kernel));
                                  aten.impl("addmm", TORCH_FN(addmm_kernel));
                                  aten.impl("mm", TORCH_FN(mm_kernel));
                                  aten.impl("bmm", TORCH_FN(bmm_kernel));
                                });
    return true;
  }();
  (void)registered;
}

}  // namespace

bool mode_on(Mode mode) { return (t_modes & static_cast<uint8_t>(mode)) != 0; }

bool set_mode(Mode mode, bool on) {
  const bool was = mode_on(mode);
  if (on) {
    register_mode_kernels();
    t_modes = static_cast<uint8_t>(t_modes | static_cast<uint8_t>(mode));
  } else {
    t_modes = static_cast<uint8_t>(t_modes & ~static_cast<uint8_t>(mode));
  }
  c10::impl::tls_set_dispatch_key_included(kModeDispatchKey, t_modes != 0);
  return was;
}

void set_matmul_routes(const MatmulRoutes& routes) {
  static std::once_flag once;
  std::call_once(once, [&] {
    g_matmul_routes = routes;
    g_matmul_routes_set.store(true);
  });
}

}  // namespace precision
}  // namespace accel
