// Activation checkpointing: see accel/activation_checkpoint.h.

#include <accel/activation_checkpoint.h>

#include "checkpoint_graph.h"
#include "matmul_replay.h"

#include "precision/fp8_scope.h"
#include "sharding/wrap_policy.h"
#include "util/torch_compat.h"

#include <accel_common/name_table.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/nn/modules/container/sequential.h>

#ifdef ACCEL_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <array>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace accel {
namespace detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// The generator states a block's forward started from: the CPU generator's, and those of the
/// CUDA devices its inputs are on (as torch.utils.checkpoint keeps them).
class GeneratorStates {
 public:
  static GeneratorStates capture(const std::vector<at::Tensor>& inputs) {
    GeneratorStates states;
    states.cpu_ = at::detail::getDefaultCPUGenerator().get_state();
#ifdef ACCEL_WITH_CUDA
    std::set<c10::DeviceIndex> devices;
    for (const auto& input : inputs) {
      if (input.defined() && input.is_cuda()) devices.insert(input.device().index());
    }
    for (const auto device : devices) {
      auto generator = at::cuda::detail::getDefaultCUDAGenerator(device);
      std::lock_guard<std::mutex> lock(generator.mutex());
      states.cuda_.emplace_back(device, generator.get_state());
    }
#else
    (void)inputs;
#endif
    return states;
  }
  /// Puts every generator it holds back in its state.
  void restore() const {
    auto cpu = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(cpu.mutex());
      cpu.set_state(cpu_);
    }
#ifdef ACCEL_WITH_CUDA
    for (const auto& [device, state] : cuda_) {
      auto generator = at::cuda::detail::getDefaultCUDAGenerator(device);
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    }
#endif
  }
  /// The states of the same generators now.
  GeneratorStates current() const {
    GeneratorStates now;
    now.cpu_ = at::detail::getDefaultCPUGenerator().get_state();
#ifdef ACCEL_WITH_CUDA
    for (const auto& entry : cuda_) {
      auto generator = at::cuda::detail::getDefaultCUDAGenerator(entry.first);
      std::lock_guard<std::mutex> lock(generator.mutex());
      now.cuda_.emplace_back(entry.first, generator.get_state());
    }
#endif
    return now;
  }

 private:
  at::Tensor cpu_;
  std::vector<std::pair<c10::DeviceIndex, at::Tensor>> cuda_;
};

/// Autocast as a block's forward ran under it, on the two device types LibTorch autocasts, and
/// whether it ran in an FP8 scope.
class AutocastState {
 public:
  static AutocastState capture() {
    AutocastState state;
    for (size_t i = 0; i < kTypes.size(); ++i) {
      state.enabled_[i] = util::autocast_enabled(kTypes[i]);
      state.dtype_[i] = util::autocast_dtype(kTypes[i]);
    }
    state.fp8_ = precision::fp8_scope_open();
    return state;
  }
  /// Sets this state, and returns the one it replaced.
  AutocastState apply() const {
    AutocastState previous = capture();
    for (size_t i = 0; i < kTypes.size(); ++i) {
      util::set_autocast_enabled(kTypes[i], enabled_[i]);
      util::set_autocast_dtype(kTypes[i], dtype_[i]);
    }
    precision::set_fp8_scope(fp8_);
    return previous;
  }

 private:
  static constexpr std::array<c10::DeviceType, 2> kTypes{c10::DeviceType::CPU,
                                                         c10::DeviceType::CUDA};
  std::array<bool, 2> enabled_{};
  std::array<at::ScalarType, 2> dtype_{};
  bool fp8_ = false;  // converted Linears in FP8 (mixed_precision "fp8")
};

/// What the node keeps between forward and backward besides the inputs.
struct BlockState : torch::CustomClassHolder {
  CheckpointedBlock block;
  GeneratorStates generators;
  AutocastState autocast;
  size_t outputs = 0;
  /// The parameters the block uses, where known (a CheckpointWrapper's module's).
  std::optional<std::vector<at::Tensor>> parameters;
  CheckpointOptions options;
  /// With options.save_matmuls: the matmuls' outputs of the forward, for the recompute.
  core::MatmulRecord matmuls;
  /// With options.offload: the CUDA inputs' copies in pinned host memory (undefined for inputs
  /// kept as they are), the devices they came from and whether they needed a gradient.
  std::vector<at::Tensor> offloaded;
  std::vector<c10::Device> devices;
  std::vector<bool> needed_grad;
};

/// The inputs the node saves: all of them, or, offloading, those not copied to host memory
/// (whose copies the state keeps).
variable_list kept_inputs(const variable_list& inputs, BlockState& state) {
  if (!state.options.offload()) return inputs;
  variable_list kept = inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& input = inputs[i];
    state.offloaded.emplace_back();
    state.devices.push_back(input.defined() ? input.device() : c10::Device(c10::kCPU));
    state.needed_grad.push_back(input.defined() && input.requires_grad());
    if (!input.defined() || !input.is_cuda()) continue;
    // Asynchronous on the current stream: the input's memory is not reused before the copy ran.
    auto host = at::empty_like(input, input.options().device(c10::kCPU).pinned_memory(true));
    host.copy_(input, /*non_blocking=*/true);
    state.offloaded.back() = std::move(host);
    kept[i] = at::Tensor();
  }
  return kept;
}

/// The saved inputs as the recompute takes them: leaves of its graph, the offloaded ones back on
/// their devices.
variable_list recompute_inputs(const variable_list& saved, BlockState& state) {
  variable_list inputs;
  for (size_t i = 0; i < saved.size(); ++i) {
    if (i < state.offloaded.size() && state.offloaded[i].defined()) {
      auto back = state.offloaded[i].to(state.devices[i], /*non_blocking=*/true);
      state.offloaded[i].reset();
      inputs.push_back(back.requires_grad_(state.needed_grad[i]));
      continue;
    }
    const auto& input = saved[i];
    inputs.push_back(input.defined() ? input.detach().requires_grad_(input.requires_grad())
                                     : input);
  }
  return inputs;
}

/// The block as one autograd node (the reentrant checkpoint). Its inputs: a tensor that needs a
/// gradient (so the node takes part in backward even when no input does), the block's inputs, and
/// its state.
struct CheckpointNode : public torch::autograd::Function<CheckpointNode> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& /*takes_part*/,
                               at::TensorList given, c10::intrusive_ptr<BlockState> state) {
    const variable_list inputs = given.vec();
    // Autograd runs this with gradients off: the block records nothing and keeps nothing.
    state->generators = GeneratorStates::capture(inputs);
    state->autocast = AutocastState::capture();
    variable_list outputs;
    {
      std::optional<core::MatmulScope> record;
      if (state->options.save_matmuls())
        record.emplace(state->matmuls, core::MatmulScope::Kind::Record);
      outputs = state->block(inputs);
    }
    bool differentiable = false;
    for (const auto& output : outputs) {
      differentiable = differentiable || (output.defined() && output.is_floating_point());
    }
    TORCH_CHECK(differentiable,
                "accel::checkpoint: the block returns no tensor that can take a gradient (",
                outputs.size(),
                " output(s), none of floating point): there is nothing to checkpoint; call the "
                "block directly");
    state->outputs = outputs.size();
    ctx->save_for_backward(kept_inputs(inputs, *state));
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list output_gradients) {
    auto state =
        c10::static_intrusive_pointer_cast<BlockState>(ctx->saved_data["state"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    // The inputs as leaves of the recomputed graph: the inner backward leaves their gradients.
    const variable_list inputs = recompute_inputs(saved, *state);
    variable_list outputs;
    {
      // The forward's generator states and autocast, then this backward's back.
      const auto now = state->generators.current();
      state->generators.restore();
      const auto previous_autocast = state->autocast.apply();
      try {
        torch::AutoGradMode with_gradients(true);
        std::optional<core::MatmulScope> replay;
        if (state->options.save_matmuls())
          replay.emplace(state->matmuls, core::MatmulScope::Kind::Replay);
        outputs = state->block(inputs);
        TORCH_CHECK(state->matmuls.replayed == state->matmuls.outputs.size(),
                    "accel::checkpoint: the block computed ", state->matmuls.replayed,
                    " matmuls when run again in backward and ", state->matmuls.outputs.size(),
                    " in forward; with save_matmuls it must compute the same thing both times");
        state->matmuls = core::MatmulRecord();
      } catch (...) {
        previous_autocast.apply();
        now.restore();
        throw;
      }
      previous_autocast.apply();
      now.restore();
    }
    variable_list roots, gradients;
    for (size_t i = 0; i < outputs.size() && i < output_gradients.size(); ++i) {
      if (!outputs[i].defined() || !outputs[i].requires_grad() || !output_gradients[i].defined())
        continue;
      roots.push_back(outputs[i]);
      gradients.push_back(output_gradients[i]);
    }
    TORCH_CHECK(outputs.size() == state->outputs, "accel::checkpoint: the block returned ",
                outputs.size(), " tensors when run again in backward, and ", state->outputs,
                " in forward: it must compute the same thing both times");
    if (!roots.empty()) torch::autograd::backward(roots, gradients);
    variable_list result{at::Tensor()};
    for (const auto& input : inputs) {
      result.push_back(input.defined() && input.requires_grad() ? input.grad() : at::Tensor());
    }
    result.emplace_back();  // the state
    return result;
  }
};

/// A tensor that needs a gradient, given to every checkpoint node (see CheckpointNode).
const at::Tensor& takes_part() {
  static const at::Tensor tensor = at::zeros({}).requires_grad_(true);
  return tensor;
}

}  // namespace

std::vector<at::Tensor> checkpoint_block(CheckpointedBlock block,
                                         const std::vector<at::Tensor>& inputs,
                                         const std::optional<std::vector<at::Tensor>>& parameters,
                                         const CheckpointOptions& options) {
  if (!at::GradMode::is_enabled()) return block(inputs);
  auto state = c10::make_intrusive<BlockState>();
  state->block = std::move(block);
  state->parameters = parameters;
  state->options = options;
  // As a TensorList, so autograd sees each input (a std::vector would pass as one non-tensor).
  return CheckpointNode::apply(takes_part(), at::TensorList(inputs), state);
}

int64_t apply_activation_checkpointing(torch::nn::Module& model,
                                       const std::vector<std::string>& classes,
                                       const CheckpointPolicy& policy) {
  core::check_checkpoint_policy(policy);
  const int64_t every = policy.mode() == CheckpointMode::Selective ? policy.every() : 1;
  auto block_options = policy.block();
  if (policy.mode() == CheckpointMode::Op) block_options.save_matmuls(true);
  int64_t seen = 0;
  auto matches = [&](const torch::nn::Module& module) {
    for (const auto& wanted : classes) {
      if (sharding::class_name_matches(module.name(), wanted)) return true;
    }
    return false;
  };
  // Sequentials first: their matching elements are wrapped in place, the rest must have none.
  int64_t wrapped = 0;
  std::set<const torch::nn::Module*> reachable;
  auto visit_sequential = [&](torch::nn::SequentialImpl& sequential) {
    for (auto it = sequential.begin(); it != sequential.end(); ++it) {
      auto module = it->ptr();
      if (auto* wrapper = dynamic_cast<CheckpointWrapperImpl*>(module.get())) {
        // Counted as when it was wrapped, so a second call wraps nothing more.
        if (matches(*wrapper->wrapped().ptr())) ++seen;
        reachable.insert(wrapper->wrapped().ptr().get());
        continue;
      }
      if (!matches(*module)) continue;
      reachable.insert(module.get());
      // torchtitan's count: the k-th, 2k-th, ... block of the model is checkpointed.
      if (++seen % every != 0) continue;
      // The wrapper takes the element's place in the Sequential's forward; the module tree,
      // and so the parameters' names, stay as they were.
      *it = torch::nn::AnyModule(std::make_shared<CheckpointWrapperImpl>(
          std::move(*it), /*register_child=*/false, block_options));
      ++wrapped;
    }
  };
  if (auto* root = dynamic_cast<torch::nn::SequentialImpl*>(&model)) visit_sequential(*root);
  for (const auto& child : model.modules(/*include_self=*/false)) {
    if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(child.get()))
      visit_sequential(*sequential);
  }
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const auto& module = *item.value();
    if (!matches(module) || reachable.count(&module) > 0) continue;
    if (dynamic_cast<const CheckpointWrapperImpl*>(&module) != nullptr) continue;
    TORCH_CHECK(false, "accel: fsdp_activation_checkpointing cannot checkpoint '", item.key(),
                "' (", module.name(),
                "): only the elements of a torch::nn::Sequential can be wrapped from outside, "
                "and this one is called from a forward (or a ModuleList) that accel does not "
                "see. Call accel::checkpoint around it in that forward, e.g. x = "
                "accel::checkpoint([&](const torch::Tensor& h) { return ",
                item.key(), "->forward(h); }, x), and leave ", module.name(),
                " out of the classes to checkpoint");
  }
  return wrapped;
}

}  // namespace detail

namespace core {

void check_checkpoint_policy(const CheckpointPolicy& policy) {
  TORCH_CHECK(to_string(policy.mode()) != nullptr, "accel: CheckpointPolicy.mode ",
              static_cast<int>(policy.mode()), " is not a CheckpointMode");
  TORCH_CHECK(policy.every() >= 1, "accel: CheckpointPolicy.every is ", policy.every(),
              "; it checkpoints every k-th block for k >= 1");
}

std::optional<CheckpointedParameters> checkpointed_parameters(const torch::autograd::Node& node) {
  const auto* block = dynamic_cast<const torch::autograd::CppNode<detail::CheckpointNode>*>(&node);
  if (block == nullptr) return std::nullopt;
  auto found = block->ctx_.saved_data.find("state");
  if (found == block->ctx_.saved_data.end()) return CheckpointedParameters{};
  const auto state =
      c10::static_intrusive_pointer_cast<detail::BlockState>(found->second.toCapsule());
  if (!state->parameters) return CheckpointedParameters{};
  return CheckpointedParameters{*state->parameters, true};
}

}  // namespace core

namespace {
// CheckpointMode's one table of names: to_string and parse_checkpoint_mode read it, and
// CheckpointPolicy's error lists it. to_string walks it itself: unlike name_in's "?", it answers
// null for a value outside the enum, which check_checkpoint_policy refuses.
constexpr std::array<std::pair<CheckpointMode, const char*>, 3> kCheckpointModeNames = {{
    {CheckpointMode::Full, "full"},
    {CheckpointMode::Selective, "selective"},
    {CheckpointMode::Op, "op"},
}};
}  // namespace

const char* to_string(CheckpointMode mode) {
  for (const auto& [value, name] : kCheckpointModeNames) {
    if (value == mode) return name;
  }
  return nullptr;
}

std::optional<CheckpointMode> parse_checkpoint_mode(std::string_view name) {
  return value_in<CheckpointMode>(kCheckpointModeNames, name);
}

CheckpointPolicy& CheckpointPolicy::mode(std::string_view name) {
  const auto parsed = parse_checkpoint_mode(name);
  TORCH_CHECK(parsed.has_value(), "accel: CheckpointPolicy.mode '", name,
              "' is not a checkpointing policy; choices: full (every block), selective (every "
              "k-th block, CheckpointPolicy.every), op (every block, keeping its matmuls' "
              "outputs)");
  return mode(*parsed);
}

CheckpointWrapperImpl::CheckpointWrapperImpl(torch::nn::AnyModule module, bool register_child,
                                             CheckpointOptions options)
    : module_(std::move(module)), options_(options) {
  TORCH_CHECK(!module_.is_empty(), "accel: CheckpointWrapper needs a module to wrap");
  if (register_child) register_module("module", module_.ptr());
}

at::Tensor CheckpointWrapperImpl::forward(const at::Tensor& input) {
  std::vector<at::Tensor> parameters;
  for (const auto& p : module_.ptr()->parameters()) {
    if (p.requires_grad()) parameters.push_back(p);
  }
  return detail::checkpoint_block(
      [module = module_](const std::vector<at::Tensor>& x) mutable {
        return std::vector<at::Tensor>{module.forward<at::Tensor>(x[0])};
      },
      {input}, parameters, options_)[0];
}

}  // namespace accel
