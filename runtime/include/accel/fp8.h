#pragma once

// FP8 training (mixed_precision "fp8"), as torchao's float8 training, which Accelerate runs as its
// "AO" backend: the chosen Linears compute their forward and both backward matmuls in FP8 with
// dynamic, amax-derived scales; master weights, gradients and the optimizer stay as they are,
// and every other operator runs under bf16 autocast.
//
// `prepare(model)` converts the Linears under mixed_precision "fp8"; a program without an
// Accelerator calls convert_to_fp8() and opens `AutocastGuard(device, kBFloat16, {}, true)`.

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accel {

/// How FP8 training scales its casts (torchao's recipe names: "tensorwise", "rowwise").
enum class Fp8Recipe {
  /// One dynamic scale per tensor; inputs and weights in e4m3, output gradients in e5m2.
  Tensorwise,
  /// One scale per row along each matmul's reduced dimension, every operand in e4m3, scales
  /// rounded down to powers of two.
  Rowwise,
};
const char* to_string(Fp8Recipe recipe);
/// The recipe `name` spells; none for another name.
std::optional<Fp8Recipe> parse_fp8_recipe(std::string_view name);

/// How FP8 training casts and which Linears it converts (Accelerate's AORecipeKwargs, torchao's
/// Float8LinearConfig).
///
/// Example:
/// ```
/// accel::Accelerator accelerator(accel::AcceleratorOptions().mixed_precision("fp8").fp8(
///     accel::Fp8Options().recipe(accel::Fp8Recipe::Rowwise)));
/// ```
struct Fp8Options {
  /// Which Linear (named as `named_modules()` names it) computes in FP8.
  using ModuleFilter =
      std::function<bool(const std::string& name, const torch::nn::LinearImpl& linear)>;

  /// The recipe by torchao's name: "tensorwise" or "rowwise"; another name throws here, naming
  /// the choices.
  Fp8Options& recipe(std::string_view name);
  /// Fp8Recipe::Tensorwise by default.
  TORCH_ARG(Fp8Recipe, recipe) = Fp8Recipe::Tensorwise;
  /// Which Linears to convert. Unset: every Linear whose in_features and out_features are
  /// multiples of 16, except the model's first and last Linear (Accelerate's
  /// filter_first_and_last_linear_layers): the FP8 matmuls need multiples of 16, and the ends of
  /// a network are the most sensitive to precision.
  TORCH_ARG(ModuleFilter, module_filter) = nullptr;
  /// The Linears to convert, by name, instead of module_filter; each must be a Linear whose
  /// features are multiples of 16.
  TORCH_ARG(std::vector<std::string>, modules);
  /// Under FULL_SHARD, all-gather each converted weight as FP8 bytes and one scale (half of
  /// bf16's bytes; torchao's enable_fsdp_float8_all_gather). Default true.
  TORCH_ARG(bool, fsdp_float8_all_gather) = true;
};

/// Converts the Linears of `model` that `options` selects: inside an FP8 scope (an
/// `AutocastGuard` opened with fp8, which every autocast scope of an Accelerator under
/// mixed_precision "fp8" is) their forward and backward matmuls run in FP8; outside one they
/// compute as before. The module tree, parameters and state dict do not change. Returns the
/// converted Linears' names. Throws on a Linear named in `modules` that
/// is missing or whose features are not multiples of 16; warns once when nothing is selected.
std::vector<std::string> convert_to_fp8(torch::nn::Module& model, const Fp8Options& options = {});

/// True when `weight` is a converted Linear's weight.
bool is_fp8_converted(const at::Tensor& weight);

}  // namespace accel
