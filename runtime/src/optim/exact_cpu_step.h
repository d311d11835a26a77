#pragma once

// LibTorch's SGD, Adam and AdamW updates on the CPU in one pass over each parameter, rounding
// every element exactly as LibTorch's op-by-op step does in this process, so that a prepared
// optimizer on one process gives, bit for bit, what the plain program gives.
//
// LibTorch's step is a chain of ATen ops (mul_, add_ with alpha, addcmul_, sqrt, div, addcdiv_),
// each rounding its result to the parameter's dtype. These kernels do the same operations in the
// same order on each element, with the same roundings:
//   - add with alpha and addcmul round once or twice as ATen's CPU kernels do: its vectorized
//     code (AVX2, AVX512) fuses the last multiply and add (one rounding), its DEFAULT capability
//     does not. aten_rounding() asks ATen which, once per dtype, on probe values;
//   - sqrt is ATen's own: on x86 it is MKL's vector sqrt (not always correctly rounded, but the
//     same result for a value wherever it stands), called straight on small blocks where it
//     gives ATen's results (direct_square_roots), else through at::sqrt_out on large ones;
//   - every other operation has one correctly rounded result.
// The file is compiled with -ffp-contract=off (runtime/CMakeLists.txt) so the compiler fuses
// nothing on its own; exact_step_check.cpp proves the whole step against LibTorch's before the
// runtime uses it (docs/design/fused-steps.md).

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>

namespace accel {
namespace optim {

/// How ATen rounds `self + alpha * other` (add with alpha) and `self + value * t1 * t2`
/// (addcmul) in this process: `fused` where the last multiply and add round once (its AVX2 and
/// AVX512 kernels), not where they round twice (its DEFAULT kernels).
struct AtenRounding {
  bool fused = false;
};

/// Whether the exact kernels take tensors of `type` (float and double).
bool exact_cpu_dtype(c10::ScalarType type);

/// ATen's rounding of add with alpha and addcmul on `type`, measured once per process; nullopt
/// when it is neither of the two above for both ops (an ATen these kernels do not know:
/// LibTorch's own step then runs).
std::optional<AtenRounding> aten_rounding(c10::ScalarType type);

/// Whether Adam's square roots of `type` come straight from MKL's vector sqrt (ATen's own on an
/// MKL build, checked against ATen's op once per process) rather than through the op.
bool direct_square_roots(c10::ScalarType type);

/// One SGD update's hyperparameters, as LibTorch's SGD reads them from a group.
struct SgdUpdate {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

/// LibTorch's SGD update of one parameter. `buffer` is its momentum buffer (undefined without
/// momentum); on `first_step` it is written as LibTorch's clone of d_p, else carried.
/// `param`, `buffer`: contiguous; `grad`: any strides, same dtype.
void exact_sgd_update(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& buffer,
                      bool first_step, const SgdUpdate& update, AtenRounding rounding);

/// One Adam or AdamW update's hyperparameters.
struct AdamUpdate {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool amsgrad = false;
  /// AdamW: the parameter decays by 1 - lr * weight_decay; Adam: weight decay is added to the
  /// gradient.
  bool decoupled_weight_decay = false;
};

/// LibTorch's Adam/AdamW update of one parameter at `step` (after its increment). State tensors
/// contiguous; `max_exp_avg_sq` undefined without amsgrad.
void exact_adam_update(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                       const at::Tensor& exp_avg_sq, const at::Tensor& max_exp_avg_sq, int64_t step,
                       const AdamUpdate& update, AtenRounding rounding);

}  // namespace optim
}  // namespace accel
