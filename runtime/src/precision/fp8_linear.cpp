// FP8 casts, the scaled matmul and the FP8 linear layer: see fp8_linear.h.

#include "fp8_linear.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include <array>
#include <utility>
#include <vector>

namespace accel {
namespace precision {
namespace {

/// The largest finite value of an FP8 format.
double fp8_max(c10::ScalarType fp8) {
  if (fp8 == c10::ScalarType::Float8_e4m3fn) return 448.0;
  TORCH_CHECK(fp8 == c10::ScalarType::Float8_e5m2, "accel: ", c10::toString(fp8),
              " is not an FP8 format accel casts to (Float8_e4m3fn, Float8_e5m2)");
  return 57344.0;
}

/// The factor x is multiplied by before the cast (torchao's scale): max(fp8) / amax.
at::Tensor quantising_factor(const at::Tensor& amax, c10::ScalarType fp8, bool power_of_2) {
  auto factor = at::reciprocal(amax.to(at::kFloat).clamp_min(1e-12)) * fp8_max(fp8);
  if (power_of_2) factor = at::exp2(at::floor(at::log2(factor)));
  return factor;
}

/// fp32 `values` times `factor`, saturated and cast: the data, and the dequantising scale.
Fp8Tensor cast_with(const at::Tensor& values, const at::Tensor& factor, c10::ScalarType fp8) {
  const double limit = fp8_max(fp8);
  auto data = (values * factor).clamp(-limit, limit).to(fp8);
  return {std::move(data), at::reciprocal(factor)};
}

/// An FP8 matrix in the layout CUDA's _scaled_mm takes for the operand it is, its reduced
/// dimension (`reduced`: 1 for the left operand, 0 for the right) padded with zeros to a
/// multiple of 16.
at::Tensor cuda_operand(const at::Tensor& data, int64_t reduced) {
  at::Tensor operand = data;
  const int64_t pad = (16 - data.size(reduced) % 16) % 16;
  if (pad > 0) {
    // A zero byte is +0 in both formats; the padding goes through bytes, which pad everywhere.
    const std::vector<int64_t> widths =
        reduced == 1 ? std::vector<int64_t>{0, pad} : std::vector<int64_t>{0, 0, 0, pad};
    operand = at::constant_pad_nd(data.view(at::kByte), widths, 0).view(data.scalar_type());
  }
  // Row-major on the left, column-major on the right.
  return reduced == 1 ? operand.contiguous() : operand.t().contiguous().t();
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// The three matmuls of `input · weightᵀ` ([M, K] · [N, K]ᵀ) in FP8.
struct Fp8Matmul : public torch::autograd::Function<Fp8Matmul> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            int64_t recipe_value) {
    // The casts and products below compute as written, whatever autocast the caller is under.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto recipe = static_cast<Fp8Recipe>(recipe_value);
    ctx->saved_data["recipe"] = recipe_value;
    ctx->saved_data["input_dtype"] = static_cast<int64_t>(input.scalar_type());
    if (recipe == Fp8Recipe::Tensorwise) {
      const auto x = quantize_fp8(input, at::kFloat8_e4m3fn);
      const auto w = fp8_weight(weight);
      // The input's FP8 bytes serve the weight's gradient too (its scale is per tensor): a
      // quarter of an fp32 activation kept for backward, half of a bf16 one.
      ctx->save_for_backward({x.data, x.scale, weight});
      return scaled_mm(x, w.t(), input.scalar_type());
    }
    const auto x = quantize_fp8(input, at::kFloat8_e4m3fn, 1, true);
    const auto w = quantize_fp8(weight, at::kFloat8_e4m3fn, 1, true);
    // Backward scales the input along the other dimension: it keeps it as given.
    ctx->save_for_backward({input, weight});
    return scaled_mm(x, w.t(), input.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto recipe = static_cast<Fp8Recipe>(ctx->saved_data["recipe"].toInt());
    const auto input_dtype = static_cast<c10::ScalarType>(ctx->saved_data["input_dtype"].toInt());
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& grad = grads[0];
    at::Tensor grad_input, grad_weight;
    if (recipe == Fp8Recipe::Tensorwise) {
      const Fp8Tensor x{saved[0], saved[1]};
      const at::Tensor& weight = saved[2];
      const auto g = quantize_fp8(grad, at::kFloat8_e5m2);
      if (ctx->needs_input_grad(0)) {
        // The weight's cast again: the same value, so the same bytes and scale as forward's.
        grad_input = scaled_mm(g, fp8_weight(weight), input_dtype);
      }
      if (ctx->needs_input_grad(1)) grad_weight = scaled_mm(g.t(), x, weight.scalar_type());
    } else {
      const at::Tensor& input = saved[0];
      const at::Tensor& weight = saved[1];
      if (ctx->needs_input_grad(0)) {
        grad_input = scaled_mm(quantize_fp8(grad, at::kFloat8_e4m3fn, 1, true),
                               quantize_fp8(weight, at::kFloat8_e4m3fn, 0, true), input_dtype);
      }
      if (ctx->needs_input_grad(1)) {
        grad_weight =
            scaled_mm(quantize_fp8(grad, at::kFloat8_e4m3fn, 0, true).t(),
                      quantize_fp8(input, at::kFloat8_e4m3fn, 0, true), weight.scalar_type());
      }
    }
    return {grad_input, grad_weight, at::Tensor()};
  }
};

}  // namespace

at::Tensor Fp8Tensor::dequantized() const { return data.to(at::kFloat) * scale; }

at::Tensor fp8_scale_for(const at::Tensor& amax, c10::ScalarType fp8, bool power_of_2) {
  return at::reciprocal(quantising_factor(amax, fp8, power_of_2));
}

Fp8Tensor quantize_fp8(const at::Tensor& x, c10::ScalarType fp8, std::optional<int64_t> reduced_dim,
                       bool power_of_2) {
  const auto values = x.to(at::kFloat);
  const auto amax =
      reduced_dim ? values.abs().amax({*reduced_dim}, /*keepdim=*/true) : values.abs().max();
  return cast_with(values, quantising_factor(amax, fp8, power_of_2), fp8);
}

Fp8Tensor quantize_fp8_with_amax(const at::Tensor& x, const at::Tensor& amax, c10::ScalarType fp8) {
  return cast_with(x.to(at::kFloat), quantising_factor(amax, fp8, false), fp8);
}

at::Tensor scaled_mm(const Fp8Tensor& a, const Fp8Tensor& b, c10::ScalarType out_dtype) {
  const bool per_tensor = a.scale.dim() == 0 && b.scale.dim() == 0;
  if (a.data.is_cuda()) {
    const auto left = cuda_operand(a.data, 1);
    const auto right = cuda_operand(b.data, 0);
    if (per_tensor) {
      return at::_scaled_mm(left, right, a.scale, b.scale, std::nullopt, std::nullopt, out_dtype);
    }
    // Row-wise scales: [M, 1] and [1, N] in fp32, with a bf16 product.
    return at::_scaled_mm(left, right, a.scale.expand({a.data.size(0), 1}).contiguous(),
                          b.scale.expand({1, b.data.size(1)}).contiguous(), std::nullopt,
                          std::nullopt, at::kBFloat16)
        .to(out_dtype);
  }
  if (per_tensor) {
    return at::_scaled_mm(a.data, b.data, a.scale, b.scale, std::nullopt, std::nullopt, out_dtype);
  }
  // The CPU's _scaled_mm takes one scale per operand: a unit-scale product accumulated in fp32,
  // then the row and column scales, as CUDA's epilogue applies them.
  const auto one = at::ones({}, a.scale.options());
  const auto product =
      at::_scaled_mm(a.data, b.data, one, one, std::nullopt, std::nullopt, at::kFloat);
  return (product * a.scale * b.scale).to(out_dtype);
}

at::Tensor fp8_linear(const at::Tensor& input, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias, Fp8Recipe recipe) {
  TORCH_CHECK(input.dim() >= 1 && input.size(-1) == weight.size(1), "accel: an FP8 Linear of ",
              weight.size(1), " input features was given an input of shape ", input.sizes());
  auto shape = input.sizes().vec();
  shape.back() = weight.size(0);
  auto output =
      Fp8Matmul::apply(input.reshape({-1, weight.size(1)}), weight, static_cast<int64_t>(recipe))
          .view(shape);
  if (bias && bias->defined()) output = output + bias->to(output.scalar_type());
  return output;
}

}  // namespace precision
}  // namespace accel
