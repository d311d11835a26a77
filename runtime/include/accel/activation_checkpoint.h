#pragma once

// Activation checkpointing (torch.utils.checkpoint, and FSDP's checkpoint_wrapper) for LibTorch:
// trade compute for the memory of the activations a block keeps for backward.
//
// LibTorch's autograd engine has no default saved-tensor hooks in C++ (PyTorch installs its
// non-reentrant checkpoint through Python), so accel takes the reentrant route: the block becomes
// one autograd node. Forward runs the block without recording a graph and keeps only its inputs;
// the node's backward runs it again with gradients on, from the generator states it started
// with (dropout draws the same mask) and under the autocast it ran under, then runs the inner
// backward, which accumulates into the block's parameters as a plain backward would. The one
// trap of the reentrant form in PyTorch, a block whose inputs need no gradient (the first
// block, fed by data) losing its parameters' gradients, is closed: the node always takes part
// in backward when gradients are on.

#include <accel/detail/module_ref.h>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace accel {

/// How one checkpointed block keeps its inputs until backward.
struct CheckpointOptions {
  /// Keep the inputs in pinned host memory between forward and the recompute (what PyTorch's
  /// save_on_cpu does for them): on CUDA the copies out and back are asynchronous on the current
  /// stream; on the CPU the inputs are in host memory already and this changes nothing.
  TORCH_ARG(bool, offload) = false;
  /// Keep the outputs of the block's matmuls (mm, addmm, bmm: its Linears' products) from
  /// forward, and recompute only the rest in backward: op-level selective checkpointing (as
  /// torchtitan's "op" mode), more memory than recomputing everything and less time. The block
  /// must compute the same matmuls both times.
  TORCH_ARG(bool, save_matmuls) = false;
};

/// Which blocks a CheckpointPolicy checkpoints, and how (torchtitan's activation checkpointing
/// modes).
enum class CheckpointMode {
  Full,       ///< "full": every matching block
  Selective,  ///< "selective": every `every`-th one (the 2nd, 4th, ... for 2), the others keep
              ///< their activations: torchtitan's per-layer selective mode
  Op,         ///< "op": every block, keeping its matmuls' outputs (CheckpointOptions::save_matmuls)
};

/// "full", "selective" or "op".
const char* to_string(CheckpointMode mode);
/// The mode a name spells, as torchtitan's config does ("full", "selective", "op"); none for
/// another.
std::optional<CheckpointMode> parse_checkpoint_mode(std::string_view name);

/// Which of the blocks `apply_activation_checkpointing` (and `fsdp_activation_checkpointing`)
/// finds are checkpointed.
///
/// Example:
/// ```
/// // torchtitan's per-layer selective checkpointing: every 2nd block recomputes.
/// accel::apply_activation_checkpointing(
///     model, {"Block"},
///     accel::CheckpointPolicy().mode(accel::CheckpointMode::Selective).every(2));
/// ```
struct CheckpointPolicy {
  /// The mode by its name ("full", "selective" or "op"); another name throws, listing them.
  CheckpointPolicy& mode(std::string_view name);
  /// CheckpointMode::Full by default.
  TORCH_ARG(CheckpointMode, mode) = CheckpointMode::Full;
  /// With CheckpointMode::Selective: how often a block is checkpointed (>= 1; 1 is Full).
  TORCH_ARG(int64_t, every) = 2;
  /// The checkpointed blocks' own options (offload).
  TORCH_ARG(CheckpointOptions, block) = {};
};

namespace detail {
/// The block as checkpoint() hands it on: the inputs in, the outputs out.
using CheckpointedBlock = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
/// checkpoint() for a block of tensors. `parameters`, when known (a wrapped module's), are kept
/// with the block's node, so that a walk of the graph (find_unused_parameters) sees them used
/// before backward runs the block again.
std::vector<at::Tensor> checkpoint_block(
    CheckpointedBlock block, const std::vector<at::Tensor>& inputs,
    const std::optional<std::vector<at::Tensor>>& parameters = std::nullopt,
    const CheckpointOptions& options = {});

int64_t apply_activation_checkpointing(torch::nn::Module& model,
                                       const std::vector<std::string>& classes,
                                       const CheckpointPolicy& policy);

template <typename Fn, typename... Inputs, size_t... I>
auto call_with(Fn& fn, const std::vector<at::Tensor>& values, std::index_sequence<I...>) {
  return fn(values[I]...);
}
}  // namespace detail

/// Returns `fn(inputs...)` (one tensor, or a std::vector of them) without keeping what `fn`
/// computes inside for backward; backward runs `fn` again. Gradients are those of calling `fn`
/// directly, bit for bit, dropout included. `fn` runs a second time during backward, so what it
/// captures must still be alive then. With gradients off (NoGradGuard, evaluation) it is a
/// plain call. Nests: a checkpointed block may checkpoint its own parts.
///
/// Example:
/// ```
/// for (auto& block : blocks) {
///   x = accel::checkpoint([&block](const torch::Tensor& h) { return block->forward(h); }, x);
/// }
/// ```
template <typename Fn, typename... Inputs>
auto checkpoint(const CheckpointOptions& options, Fn fn, const Inputs&... inputs) {
  static_assert(sizeof...(Inputs) > 0, "accel::checkpoint needs the block's input tensors");
  static_assert((std::is_convertible_v<const Inputs&, const at::Tensor&> && ...),
                "accel::checkpoint: the block's inputs are tensors");
  using Result = std::invoke_result_t<Fn&, const Inputs&...>;
  constexpr bool one = std::is_convertible_v<Result, at::Tensor>;
  static_assert(one || std::is_same_v<Result, std::vector<at::Tensor>>,
                "accel::checkpoint: the block returns a tensor or a std::vector of tensors");
  auto block = [fn = std::move(fn)](const std::vector<at::Tensor>& values) mutable {
    auto result =
        detail::call_with<Fn, Inputs...>(fn, values, std::index_sequence_for<Inputs...>{});
    if constexpr (one) {
      return std::vector<at::Tensor>{at::Tensor(result)};
    } else {
      return result;
    }
  };
  auto outputs =
      detail::checkpoint_block(std::move(block), {at::Tensor(inputs)...}, std::nullopt, options);
  if constexpr (one) {
    return outputs.front();
  } else {
    return outputs;
  }
}

/// checkpoint() with the default options.
template <typename Fn, typename... Inputs>
auto checkpoint(Fn fn, const Inputs&... inputs) {
  return checkpoint(CheckpointOptions(), std::move(fn), inputs...);
}

/// A module whose forward is checkpointed (PyTorch's checkpoint_wrapper): for blocks of a
/// torch::nn::Sequential, which take one tensor and return one. The wrapped module is
/// registered as its child "module".
///
/// Example:
/// ```
/// torch::nn::Sequential blocks;
/// for (int i = 0; i < 24; ++i) blocks->push_back(accel::CheckpointWrapper(Block(1024)));
/// ```
class CheckpointWrapperImpl : public torch::nn::Module {
 public:
  /// Wraps `module`, which must have a forward(Tensor) -> Tensor.
  template <typename ModuleType>
  explicit CheckpointWrapperImpl(torch::nn::ModuleHolder<ModuleType> module,
                                 CheckpointOptions options = {})
      : CheckpointWrapperImpl(torch::nn::AnyModule(module), /*register_child=*/true, options) {}
  /// Wraps what `module` holds; with `register_child` false the wrapped module stays out of this
  /// module's children (its parameters keep their names where they are registered already).
  CheckpointWrapperImpl(torch::nn::AnyModule module, bool register_child,
                        CheckpointOptions options = {});

  at::Tensor forward(const at::Tensor& input);
  /// The wrapped module.
  const torch::nn::AnyModule& wrapped() const { return module_; }

 private:
  torch::nn::AnyModule module_;
  CheckpointOptions options_;
};
TORCH_MODULE(CheckpointWrapper);

/// Checkpoints every submodule of `model` whose class is one of `classes` (names as
/// fsdp_transformer_layer_cls_to_wrap takes them), as fsdp_activation_checkpointing does at
/// prepare(): each is replaced, in the Sequential that calls it, by a CheckpointWrapper around
/// it; parameter names and the state dict do not change. A matching submodule that is not an
/// element of a Sequential (a member called from a forward, a ModuleList's element) cannot be
/// wrapped from outside: that is an error naming it, which says to call accel::checkpoint in
/// that forward instead. Returns how many were wrapped. Wrapping twice is a no-op. `policy`
/// chooses which of the matching blocks are wrapped (all, or every k-th) and their options; an
/// unknown mode or an `every` below 1 is an error naming the choices.
template <typename ModuleType>
int64_t apply_activation_checkpointing(ModuleType&& model, const std::vector<std::string>& classes,
                                       const CheckpointPolicy& policy = {}) {
  return detail::apply_activation_checkpointing(detail::module_ref(model), classes, policy);
}

}  // namespace accel
