#pragma once

// FP8 matmuls with dynamic scaling (torchao's float8 training): the casts, the scaled matmul and
// the linear layer whose forward and backward use them. fp8_kernels.cpp routes converted Linears
// here.

#include <accel/fp8.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace accel {
namespace precision {

using accel::Fp8Recipe;

/// A tensor cast to FP8: its value is `data` (FP8) times `scale` (fp32: a 0-dim tensor for one
/// scale per tensor, or one per row [rows, 1] or per column [1, columns]).
struct Fp8Tensor {
  at::Tensor data;
  at::Tensor scale;
  /// The transposed matrix, scales with it.
  Fp8Tensor t() const { return {data.t(), scale.dim() == 0 ? scale : scale.t()}; }
  /// The value in fp32 (the emulation: dequantised).
  at::Tensor dequantized() const;
};

/// `x` cast to `fp8` with a dynamic scale: max|x| maps to the format's largest finite value, over
/// the whole tensor (`reduced_dim` unset) or along `reduced_dim` of a matrix (one scale per row
/// for 1, per column for 0); with `power_of_2` the scale is rounded down to a power of two. As
/// torchao: the amax is clamped to 1e-12, and x·scale is saturated before the cast.
Fp8Tensor quantize_fp8(const at::Tensor& x, c10::ScalarType fp8,
                       std::optional<int64_t> reduced_dim = std::nullopt, bool power_of_2 = false);

/// quantize_fp8 with the amax given (one value per tensor): what a FULL_SHARD process casts its
/// shard with once the processes have agreed on the whole tensor's amax, the same bytes as the
/// whole tensor's cast.
Fp8Tensor quantize_fp8_with_amax(const at::Tensor& x, const at::Tensor& amax, c10::ScalarType fp8);

/// The scale quantize_fp8 would use for a tensor whose largest magnitude is `amax` (fp32, any
/// shape): the dequantising factor amax / max(fp8), as quantize_fp8 gives it.
at::Tensor fp8_scale_for(const at::Tensor& amax, c10::ScalarType fp8, bool power_of_2);

/// a·b for FP8 matrices [M, K]·[K, N] with their scales, accumulated in fp32 and returned in
/// `out_dtype`: `at::_scaled_mm`, with the operands laid out as CUDA's needs them, and the
/// per-row scales applied around a unit-scale product on the CPU (whose `_scaled_mm` takes
/// per-tensor scales only). On CUDA a reduced dimension that is not a multiple of 16 is padded
/// with zeros.
at::Tensor scaled_mm(const Fp8Tensor& a, const Fp8Tensor& b, c10::ScalarType out_dtype);

/// A converted weight's tensorwise e4m3 cast made elsewhere: under FULL_SHARD, all-gathered as
/// FP8 bytes and one scale (sharding/unit_gather.cpp); none when it cannot serve one now.
using Fp8WeightGather = std::function<std::optional<Fp8Tensor>()>;
/// Whether `weight` is a converted Linear's that wants its FP8 cast all-gathered (the
/// tensorwise recipe with Fp8Options.fsdp_float8_all_gather).
bool gathers_in_fp8(const at::Tensor& weight);
/// Makes `gather` serve fp8_weight(weight).
void set_fp8_weight_gather(const at::Tensor& weight, Fp8WeightGather gather);
/// The converted weight's tensorwise e4m3 cast: the gathered one where a gather serves it, the
/// weight cast here otherwise.
Fp8Tensor fp8_weight(const at::Tensor& weight);

/// The FP8 result of these operators where their weight is a converted Linear's (its t() for
/// addmm and matmul, as LinearImpl::forward passes it); none otherwise. Called by
/// kModeDispatchKey's kernels in an FP8 scope, below the key.
std::optional<at::Tensor> fp8_route_linear(const at::Tensor& input, const at::Tensor& weight,
                                           const std::optional<at::Tensor>& bias);
std::optional<at::Tensor> fp8_route_addmm(const at::Tensor& self, const at::Tensor& mat1,
                                          const at::Tensor& mat2, const c10::Scalar& beta,
                                          const c10::Scalar& alpha);
std::optional<at::Tensor> fp8_route_matmul(const at::Tensor& self, const at::Tensor& other);

/// `linear(input, weight, bias)` with the three matmuls in FP8 under `recipe`: the output and the
/// input's gradient in the input's dtype, the weight's gradient in the weight's. The bias is
/// added in the output's dtype.
at::Tensor fp8_linear(const at::Tensor& input, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias, Fp8Recipe recipe);

}  // namespace precision
}  // namespace accel
