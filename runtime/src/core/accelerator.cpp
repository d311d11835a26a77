#include <accel/accelerator.h>

#include <accel/activation_checkpoint.h>

#include "accelerator_impl.h"
#include "distributed/collectives.h"
#include "distributed/distributed_state.h"
#include "distributed/gradient_sync.h"
#include "optim/exact_step_check.h"
#include "parallel/tensor_parallel.h"
#include "sharding/optimizer_state_tensors.h"
#include "sharding/wrap_policy.h"
#include "step_checks.h"
#include "util/collective_label.h"
#include "util/torch_compat.h"

#include <torch/nn/utils/clip_grad.h>

#ifdef ACCEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <c10/util/Exception.h>
#include <c10/util/Type.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <optional>
#include <unordered_map>
#include <utility>

namespace accel {

using detail::PreparedModel;

// ---- Scopes -------------------------------------------------------------------------------------

AccumulateScope::AccumulateScope(Accelerator* accelerator,
                                 std::vector<const torch::nn::Module*> models,
                                 std::optional<bool> sync)
    : accelerator_(accelerator), models_(std::move(models)), autocast_(accelerator->autocast()) {
  skipped_sync_ = accelerator_->impl_->begin_accumulate(models_, sync);
}
AccumulateScope::AccumulateScope(AccumulateScope&& other) noexcept
    : accelerator_(other.accelerator_),
      models_(std::move(other.models_)),
      skipped_sync_(other.skipped_sync_),
      autocast_(std::move(other.autocast_)) {
  other.accelerator_ = nullptr;
}
AccumulateScope::~AccumulateScope() {
  if (accelerator_ != nullptr) accelerator_->impl_->end_accumulate(models_, skipped_sync_);
}

NoSyncGuard::NoSyncGuard(Accelerator* accelerator, const torch::nn::Module* model)
    : accelerator_(accelerator), model_(model) {
  accelerator_->impl_->enter_no_sync(model_);
}
NoSyncGuard::NoSyncGuard(NoSyncGuard&& other) noexcept
    : accelerator_(other.accelerator_), model_(other.model_) {
  other.accelerator_ = nullptr;
}
NoSyncGuard::~NoSyncGuard() {
  if (accelerator_ != nullptr) accelerator_->impl_->exit_no_sync(model_);
}

MainProcessFirst::MainProcessFirst(Accelerator* accelerator, bool goes_first)
    : accelerator_(accelerator), goes_first_(goes_first) {
  if (!goes_first_) accelerator_->wait_for_everyone();
}
MainProcessFirst::MainProcessFirst(MainProcessFirst&& other) noexcept
    : accelerator_(other.accelerator_), goes_first_(other.goes_first_) {
  other.accelerator_ = nullptr;
}
MainProcessFirst::~MainProcessFirst() noexcept(false) {
  // While unwinding, a barrier could only add a second error; the others time out instead.
  if (accelerator_ != nullptr && goes_first_ && std::uncaught_exceptions() == 0) {
    accelerator_->wait_for_everyone();
  }
}

JoinScope::JoinScope(Accelerator* accelerator, std::vector<const torch::nn::Module*> models,
                     std::optional<bool> even_batches)
    : accelerator_(accelerator), models_(std::move(models)) {
  accelerator_->impl_->begin_join(models_, even_batches);
}
JoinScope::JoinScope(JoinScope&& other) noexcept
    : accelerator_(other.accelerator_), models_(std::move(other.models_)) {
  other.accelerator_ = nullptr;
}
JoinScope::~JoinScope() noexcept(false) {
  // While unwinding, shadowing could only add a second error; the others time out instead.
  if (accelerator_ != nullptr && std::uncaught_exceptions() == 0)
    accelerator_->impl_->end_join(models_);
}

// ---- Construction and identity ------------------------------------------------------------------

namespace {

std::optional<c10::ScalarType> mixed_precision_dtype(MixedPrecision mixed_precision) {
  // fp8: the operators that do not run in FP8 autocast to bf16 (torchao's float8 training).
  if (mixed_precision == MixedPrecision::Bf16 || mixed_precision == MixedPrecision::Fp8)
    return c10::ScalarType::BFloat16;
  if (mixed_precision == MixedPrecision::Fp16) return c10::ScalarType::Half;
  return std::nullopt;
}

/// Refuses at construction what would fail (or silently run in fp32) at the first step.
void check_mixed_precision_available(MixedPrecision mixed_precision, const torch::Device& device) {
#ifdef ACCEL_WITH_CUDA
  if (mixed_precision == MixedPrecision::Fp8 && device.is_cuda()) {
    const auto* properties = at::cuda::getDeviceProperties(device.index());
    TORCH_CHECK(properties->major * 10 + properties->minor >= 89,
                "accel: mixed_precision 'fp8' needs a CUDA device of compute capability 8.9 or "
                "newer (FP8 matmuls: Ada, Hopper, Blackwell); ",
                properties->name, " is ", properties->major, ".", properties->minor,
                "; available: no, bf16, fp16");
  }
#endif
  if (mixed_precision == MixedPrecision::Fp16) {
    TORCH_CHECK(device.is_cuda(),
                "accel: mixed_precision 'fp16' needs a CUDA device, and this "
                "process runs on ",
                device.str(), "; available here: no, bf16");
  }
  if (mixed_precision == MixedPrecision::Bf16 || mixed_precision == MixedPrecision::Fp8) {
    TORCH_CHECK(detail::autocast_supports(device.type(), c10::ScalarType::BFloat16),
                "accel: mixed_precision '", to_string(mixed_precision), "' is not available on ",
                device.str(), " in this LibTorch; available: no");
#ifdef ACCEL_WITH_CUDA
    if (device.is_cuda()) {
      const auto* properties = at::cuda::getDeviceProperties(device.index());
      TORCH_CHECK(properties->major >= 8,
                  "accel: mixed_precision 'bf16' needs a CUDA device of "
                  "compute capability 8.0 or newer; ",
                  properties->name, " is ", properties->major, ".", properties->minor,
                  "; available: no, fp16");
    }
#endif
  }
}

}  // namespace

Accelerator::Accelerator(AcceleratorOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = resolve_options(options);
  impl_->dist = detail::DistributedState::get(impl_->group_settings());
  impl_->project = impl_->options.project_config;
  impl_->device = impl_->dist->device(impl_->options.cpu);
  impl_->trackers = tracking::Trackers(is_main_process());
  TORCH_CHECK(!(impl_->dist->backend() == "nccl" && impl_->device.is_cpu()),
              "accel: this process's group uses NCCL (created by an earlier Accelerator); an "
              "Accelerator with cpu=true cannot share it");
#ifdef ACCEL_WITH_CUDA
  if (impl_->device.is_cuda()) c10::cuda::set_device(impl_->device.index());
#endif
  check_mixed_precision_available(impl_->options.mixed_precision, impl_->device);
  // Every process constructs its Accelerator at the same point: the groups' rendezvous.
  if (impl_->options.parallelism_config) {
    form_mesh();
  } else if (impl_->hybrid()) {
    impl_->dist->hybrid_groups(impl_->group_settings());
  }
  impl_->gradient_state->fused_optimizer = impl_->options.fused_optimizer;
  if (impl_->distributed()) {
    impl_->gradient_state->refuse_unaveraged = !impl_->options.allow_unprepared_parameters;
    if (impl_->options.debug) {
      impl_->gradient_state->compare_after_step = detail::parameter_comparison(impl_->dist);
    }
  }
  if (impl_->options.mixed_precision == MixedPrecision::Fp16) {
    impl_->gradient_state->scaler = std::make_shared<GradScaler>(impl_->options.grad_scaler);
    if (impl_->sharded() && impl_->distributed()) {
      // Each process checks only its own gradient shard; all must skip or step together.
      impl_->gradient_state->scaler->set_found_inf_reduction([dist = impl_->dist](bool found) {
        auto flag = torch::tensor({found ? int64_t{1} : int64_t{0}}, torch::kInt64);
        detail::all_reduce(*dist->host_group(), flag, Reduction::Max);
        return flag.item<int64_t>() > 0;
      });
    }
  }
}

void Accelerator::form_mesh() {
  auto& config = *impl_->options.parallelism_config;
  // Accelerate's rule: a config that leaves every size at 1 is plain data parallelism.
  if (config.total_size() == 1) config.dp_replicate_size(num_processes());
  TORCH_CHECK(config.total_size() == num_processes(), "accel: parallelism_config's sizes (",
              "dp_replicate_size ", config.dp_replicate_size(), " x dp_shard_size ",
              config.dp_shard_size(), " x tp_size ", config.tp_size(), " x cp_size ",
              config.cp_size(), " = ", config.total_size(), ") do not multiply to the ",
              num_processes(), " processes of this job");
  if (impl_->distributed()) impl_->mesh = &impl_->dist->mesh(config, impl_->group_settings());
}

int64_t Accelerator::mesh_coordinate(int dim, const char* method) const {
  TORCH_CHECK(impl_->options.parallelism_config.has_value(), "accel: ", method,
              "() needs a device mesh; set AcceleratorOptions::parallelism_config, or launch "
              "with --use_parallelism_config");
  return impl_->mesh != nullptr ? impl_->mesh->coordinate(static_cast<detail::MeshDim>(dim)) : 0;
}

int64_t Accelerator::data_parallel_rank() const {
  return mesh_coordinate(static_cast<int>(detail::MeshDim::dp_replicate), "data_parallel_rank");
}
int64_t Accelerator::data_parallel_shard_rank() const {
  return mesh_coordinate(static_cast<int>(detail::MeshDim::dp_shard), "data_parallel_shard_rank");
}
int64_t Accelerator::tensor_parallel_rank() const {
  return mesh_coordinate(static_cast<int>(detail::MeshDim::tp), "tensor_parallel_rank");
}
int64_t Accelerator::context_parallel_rank() const {
  return mesh_coordinate(static_cast<int>(detail::MeshDim::cp), "context_parallel_rank");
}
int64_t Accelerator::pipeline_parallel_rank() const {
  mesh_coordinate(0, "pipeline_parallel_rank");
  return 0;
}
const std::optional<ParallelismConfig>& Accelerator::parallelism_config() const {
  return impl_->options.parallelism_config;
}

Accelerator::~Accelerator() {
  try {
    end_training();
  } catch (...) {
    // A destructor does not throw; end_training reports a tracker's failure itself.
  }
}

torch::Device Accelerator::device() const { return impl_->device; }
int64_t Accelerator::process_index() const { return impl_->dist->rank(); }
int64_t Accelerator::local_process_index() const { return impl_->dist->identity().local_rank; }
int64_t Accelerator::num_processes() const { return impl_->dist->world_size(); }
int64_t Accelerator::local_num_processes() const {
  return impl_->dist->identity().local_world_size;
}

const ResolvedOptions& Accelerator::options() const { return impl_->options; }
std::shared_ptr<detail::GradientState> Accelerator::gradient_state() const {
  return impl_->gradient_state;
}
GradScaler* Accelerator::scaler() const { return impl_->gradient_state->scaler.get(); }

AutocastGuard Accelerator::autocast() const { return autocast(impl_->options.autocast); }

AutocastGuard Accelerator::autocast(const AutocastOptions& options) const {
  const auto mixed_precision = impl_->options.mixed_precision;
  if (!options.enabled()) {
    // As Accelerate: a full-precision part inside a mixed-precision scope; nothing without one.
    if (mixed_precision == MixedPrecision::No)
      return AutocastGuard(impl_->device.type(), std::nullopt);
    return AutocastGuard::disabled(impl_->device.type());
  }
  return AutocastGuard(impl_->device.type(), mixed_precision_dtype(mixed_precision),
                       options.cache_enabled(), mixed_precision == MixedPrecision::Fp8);
}

bool Accelerator::optimizer_step_was_skipped() const {
  return impl_->gradient_state->optimizer_step_was_skipped;
}

bool Accelerator::sync_gradients() const { return impl_->gradient_state->sync_gradients; }
bool Accelerator::end_of_dataloader() const { return impl_->gradient_state->end_of_dataloader; }

// ---- prepare ------------------------------------------------------------------------------------

void Accelerator::prepare_model(torch::nn::Module& model, const TensorParallelPlan* plan) {
  detail::CollectiveLabel collective_label("prepare_model");
  if (impl_->find(&model) != nullptr) return;
  const auto parameters = model.parameters();
  const bool empty = std::any_of(parameters.begin(), parameters.end(),
                                 [](const torch::Tensor& p) { return p.is_meta(); });
  if (empty) {
    // Built with init_empty_weights: under FULL_SHARD the parameters stay empty until
    // prepare(optimizer) gives each process its zero shards on the device and a load fills them;
    // no process holds the whole model at any time.
    TORCH_CHECK(impl_->shards_parameters(),
                "accel: the model has empty parameters (init_empty_weights); prepare() can take "
                "it so only under FULL_SHARD or HYBRID_SHARD on several processes (sharding "
                "strategy here: ",
                impl_->effective_sharding_strategy(),
                "). Otherwise fill it first: accel::load_checkpoint_in_model, or "
                "load_checkpoint_and_dispatch for inference");
    if (impl_->options.device_placement) {
      torch::NoGradGuard no_grad;
      for (auto& buffer : model.buffers()) {
        if (!buffer.is_meta()) buffer.set_data(buffer.to(impl_->device));
      }
    }
  } else if (impl_->options.device_placement) {
    model.to(impl_->device);
  }
  if (impl_->options.fsdp_activation_checkpointing) {
    detail::apply_activation_checkpointing(model, impl_->options.fsdp_transformer_layer_cls_to_wrap,
                                           impl_->options.activation_checkpointing_policy);
  }
  if (plan != nullptr) apply_tensor_parallel(model, *plan);
  if (impl_->options.mixed_precision == MixedPrecision::Fp8) {
    const auto* mesh = impl_->mesh;
    TORCH_CHECK(plan == nullptr || mesh == nullptr || !mesh->config().tp_enabled(),
                "accel: mixed_precision 'fp8' with tensor parallelism (tp_size ",
                mesh == nullptr ? 1 : mesh->config().tp_size(),
                ") is not supported yet: FP8 casts of tensor-parallel slices need their scales "
                "reduced over the group. Train this mesh in bf16, or fp8 without tp");
    convert_to_fp8(model, impl_->options.fp8);
  }
  PreparedModel prepared;
  prepared.module = &model;
  if (impl_->distributed()) {
    detail::record_averaged_parameters(*impl_->gradient_state, model, impl_->models.size());
    // ZeRO-2's and ZeRO-3's optimizers (and HYBRID_SHARD's) reduce-scatter the gradients in
    // backward; the other strategies all-reduce them during it.
    const auto strategy = impl_->options.sharding_strategy;
    const bool all_reduce =
        strategy == ShardingStrategy::NoShard || strategy == ShardingStrategy::ShardOptimizerState;
    // A gradient group of one process (tensor parallelism over the whole job) has nothing to
    // average: no reducer, whose buckets would hold a second copy of the gradients.
    if (impl_->gradient_group()->getSize() > 1) {
      prepared.sync = std::make_unique<detail::GradientSynchronizer>(
          model, impl_->gradient_group(), impl_->host_group(), impl_->options.ddp, all_reduce);
    }
  }
  impl_->models.push_back(std::move(prepared));
}

void Accelerator::apply_tensor_parallel(torch::nn::Module& model, const TensorParallelPlan& plan) {
  const auto* mesh = impl_->mesh;
  if (mesh == nullptr || !mesh->config().tp_enabled()) {
    // Ignored where nothing is split, so one program runs on every layout; still checked.
    detail::check_tensor_parallel_plan(model, plan, 1);
    return;
  }
  // Every process splits the same whole tensors: rank 0's, as prepare() gives every process.
  std::vector<torch::Tensor> states;
  for (const auto& p : model.parameters()) states.push_back(p);
  for (const auto& b : model.buffers()) states.push_back(b);
  if (!states.empty()) {
    torch::NoGradGuard no_grad;
    c10d::broadcast_coalesced(impl_->dist->device_group(), states, 1 << 24, 0);
  }
  detail::apply_tensor_parallel_plan(model, plan, mesh->group(detail::MeshGroup::tp));
}

void Accelerator::report_optimizer_path(const char* mangled_type, bool fused,
                                        detail::StepKernel kernel,
                                        const torch::optim::Optimizer* optimizer) const {
  if (!impl_->options.debug || !is_main_process()) return;
  const char* path = "with its own per-parameter step (only AdamW, Adam and SGD have another)";
  if (!impl_->options.fused_optimizer) {
    path = "with its own per-parameter step (fused_optimizer / ACCEL_FUSED_OPTIMIZER is off)";
  } else if (fused && kernel == detail::StepKernel::fused) {
    path =
        "through fused kernels (on the CPU accel's, bit for bit LibTorch's step; on CUDA "
        "ATen's)";
  } else if (fused && kernel == detail::StepKernel::foreach) {
    path = "through ATen's foreach ops (a parameter is not contiguous, or not on a CUDA device)";
  } else if (fused) {
    path =
        "with its own per-parameter step (a parameter suits neither the fused kernels nor, "
        "off the CPU, the foreach ops)";
  }
  std::string why;
  if (fused && kernel == detail::StepKernel::none && optimizer != nullptr) {
    why = detail::exact_cpu_step_refusal(*optimizer);
    if (!why.empty()) why = "; the CPU's exact kernels are not used: " + why;
  }
  std::fprintf(stderr, "accel: prepared optimizer %s steps %s%s\n",
               c10::demangle(mangled_type).c_str(), path, why.c_str());
}

ShardingStrategy Accelerator::Impl::effective_sharding_strategy() const {
  return sharded() ? options.sharding_strategy : ShardingStrategy::NoShard;
}

std::shared_ptr<detail::ShardedStep> Accelerator::shard_optimizer(
    torch::optim::Optimizer& optimizer) {
  if (!impl_->sharded()) return nullptr;
  const bool full_shard = impl_->shards_parameters();
  const auto plan =
      detail::ShardingPlan(impl_->shard_group())
          .reduction(impl_->options.sharding_strategy == ShardingStrategy::ShardOptimizerState
                         ? detail::GradientReduction::slice_all_reduced
                         : detail::GradientReduction::reduce_scatter)
          // Gradients are sent in units as large as DDP's buckets.
          .unit_bytes(impl_->options.ddp.bucket_cap_mb() << 20)
          .collectives(impl_->dist->backend() == "gloo" ? detail::ShardCollectives::all_reduce
                                                        : detail::ShardCollectives::native)
          .shard_parameters(full_shard)
          .unit_of(impl_->shard_units(optimizer))
          .replicate_group(impl_->replicate_group())
          .offload_to_host(impl_->options.fsdp_offload_params)
          .device_of_empty_weights(full_shard ? std::optional<torch::Device>(impl_->device)
                                              : std::nullopt);
  auto shards = std::make_shared<detail::OptimizerShards>(optimizer, plan);
  const auto& reduce = impl_->options.fsdp_reduce_dtype;
  if (reduce != "fp32") shards->set_reduce_dtype(reduce == "bf16" ? at::kBFloat16 : at::kHalf);
  shards->set_prefetch(impl_->options.fsdp_forward_prefetch, impl_->options.fsdp_backward_prefetch);
  // Optimizers destroyed since leave expired entries; they go as new ones come.
  auto& known = impl_->shards;
  known.erase(std::remove_if(known.begin(), known.end(), [](const auto& w) { return w.expired(); }),
              known.end());
  known.push_back(shards);
  return shards;
}

detail::ShardUnitOf Accelerator::Impl::shard_units(const torch::optim::Optimizer& optimizer) const {
  // Each parameter's model: sharded parameters are served to every process's operators alike,
  // so they must be the same everywhere first, as prepare(model) makes them.
  std::unordered_map<const c10::TensorImpl*, int64_t> units;
  const auto& classes = options.fsdp_transformer_layer_cls_to_wrap;
  const int64_t min_num_params = options.fsdp_min_num_params;
  const bool by_size = min_num_params > 0;
  // ZeRO-1 and -2 send gradients in runs of about a bucket, unless a unit's parameters must be
  // the ones a forward uses or leaves out together.
  const bool conditional = *options.ddp.find_unused_parameters() || *options.ddp.static_graph();
  if (!shards_parameters() && !conditional) return nullptr;
  const bool by_module = classes.empty() && !by_size && conditional;
  const bool by_policy = !classes.empty() || by_size || by_module;
  int64_t next = 1;
  for (const auto& model : models) {
    if (!by_policy) {
      for (const auto& p : model.module->parameters()) units[p.unsafeGetTensorImpl()] = 0;
      continue;
    }
    const auto policy = by_module ? detail::units_by_module(*model.module, next)
                        : by_size ? detail::units_by_size(*model.module, min_num_params, next)
                                  : detail::units_by_class(*model.module, classes, next);
    for (const auto& [param, unit] : policy) {
      units[param] = unit;
      next = std::max(next, unit + 1);
    }
  }
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      TORCH_CHECK(units.count(p.unsafeGetTensorImpl()) != 0, "accel: ", options.sharding_strategy,
                  " shards the parameters of prepared models: prepare the model before its "
                  "optimizer (an optimizer parameter belongs to no prepared model)");
    }
  }
  // Without a wrap policy, units are runs of parameters of about a bucket (OptimizerShards' own
  // rule).
  if (!by_policy) return nullptr;
  return [units = std::move(units)](const torch::Tensor& p) {
    return units.at(p.unsafeGetTensorImpl());
  };
}

void Accelerator::move_optimizer_state(torch::optim::Optimizer& optimizer) {
  if (!impl_->options.device_placement) return;
  // Each parameter's state goes where the parameter is: the device, or the host for the shards of
  // a CPU-offloaded run.
  std::unordered_map<const void*, torch::Device> devices;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) devices.emplace(p.unsafeGetTensorImpl(), p.device());
  }
  for (auto& entry : optimizer.state()) {
    const auto found = devices.find(entry.first);
    const torch::Device device = found != devices.end() ? found->second : impl_->device;
    const auto tensors = detail::elementwise_state(*entry.second);
    if (!tensors) continue;
    for (auto* t : *tensors) {
      if (t->defined()) *t = t->to(device);
    }
  }
}

detail::LoaderContext Accelerator::loader_context(size_t batch_size) {
  detail::LoaderContext context;
  context.sharding.batch_size = batch_size;
  context.sharding.split_batches = impl_->options.split_batches;
  context.sharding.even_batches = impl_->options.even_batches;
  // The processes of one data rank (its tp and cp processes) read the same batches.
  context.sharding.num_processes = impl_->data_parallel_size();
  context.sharding.process_index = impl_->data_rank();
  context.seed = impl_->options.seed;
  if (impl_->distributed()) {
    // A program that seeds each process differently must still shuffle the same way everywhere,
    // or the shards would overlap: the main process's generator state decides the order.
    Impl* impl = impl_.get();
    context.main_process_state = [impl](const torch::Tensor& state) {
      auto shared = state.clone();
      detail::broadcast(impl->host_group(), shared, 0);  // a CPU generator state
      return shared;
    };
    context.broadcast_from_main = [impl](const c10::IValue& value) {
      return detail::broadcast_ivalue(impl->host_group(), value, 0);
    };
    context.gather_values = [impl](const c10::IValue& value) {
      return detail::all_gather_ivalues(impl->host_group(), value);
    };
    // rng_types: the generators every process copies from the main one as a pass starts.
    std::vector<at::Generator> generators;
    if (impl_->options.synchronize_cpu_generator) {
      generators.push_back(at::detail::getDefaultCPUGenerator());
    }
    if (impl_->options.synchronize_cuda_generator && impl_->device.is_cuda()) {
      generators.push_back(at::globalContext().defaultGenerator(impl_->device));
    }
    if (!generators.empty()) {
      context.synchronize_generators = [impl, generators]() mutable {
        for (auto& generator : generators) {
          std::lock_guard<std::mutex> lock(generator.mutex());
          auto state = generator.get_state();  // a CPU byte tensor, on every device type
          detail::broadcast(impl->host_group(), state, 0);
          generator.set_state(state);
        }
      };
    }
  }
  context.device = impl_->device;
  context.device_placement = impl_->options.device_placement;
  context.state = impl_->gradient_state;
  return context;
}

// ---- Training loop ------------------------------------------------------------------------------

bool Accelerator::Impl::begin_accumulate(const std::vector<const torch::nn::Module*>& models,
                                         std::optional<bool> sync) {
  ++step;
  auto& state = *gradient_state;
  program_counts_accumulation = sync.has_value();
  if (sync) {
    state.sync_gradients = *sync;
  } else if (state.end_of_dataloader && options.sync_with_dataloader) {
    state.step = 0;
    state.sync_gradients = true;
  } else {
    state.step += 1;
    state.sync_gradients = state.step % options.gradient_accumulation_steps == 0;
  }
  if (state.sync_gradients) return false;
  // sync_each_batch: the models synchronise on every micro-step; the optimizers still wait.
  if (!options.sync_each_batch) {
    for (const auto* model : models) enter_no_sync(model);
  }
  for (auto* gate : state.gates) gate->close();
  return true;
}

void Accelerator::Impl::end_accumulate(const std::vector<const torch::nn::Module*>& models,
                                       bool skipped_sync) {
  program_counts_accumulation = false;
  if (!skipped_sync) return;
  if (!options.sync_each_batch) {
    for (const auto* model : models) exit_no_sync(model);
  }
  for (auto* gate : gradient_state->gates) gate->open();
}

void Accelerator::Impl::enter_no_sync(const torch::nn::Module* model) {
  if (auto* m = find(model)) ++m->no_sync_depth;
}
void Accelerator::Impl::exit_no_sync(const torch::nn::Module* model) {
  if (auto* m = find(model)) m->no_sync_depth = std::max(0, m->no_sync_depth - 1);
}
int64_t Accelerator::gradient_all_reduces() const {
  int64_t total = 0;
  for (const auto& m : impl_->models) {
    if (m.sync) total += m.sync->synchronised_backwards();
  }
  return total;
}

Accelerator::GradientBytes Accelerator::compressed_gradient_bytes() const {
  GradientBytes total;
  for (const auto& m : impl_->models) {
    if (!m.sync) continue;
    const auto [buckets, sent] = m.sync->compressed_bytes();
    total.buckets += buckets;
    total.sent += sent;
  }
  return total;
}

void Accelerator::trigger_sync(const torch::nn::Module* model) {
  if (auto* m = impl_->find(model)) m->force_sync = true;
}

void Accelerator::unscale_gradients() {
  auto* scaler = this->scaler();
  // Only on synchronisation steps: the scaler unscales once per optimizer step.
  if (scaler == nullptr || !sync_gradients()) return;
  for (auto* gate : impl_->gradient_state->gates) {
    if (!scaler->unscaled(*gate->optimizer())) scaler->unscale_(*gate->optimizer());
  }
}

double Accelerator::clip_grad_norm_(const std::vector<torch::Tensor>& parameters, double max_norm,
                                    double norm_type) {
  detail::CollectiveLabel collective_label("clip_grad_norm_");
  // Inside an accumulation window the gradients are partial and each process's own: clipping them
  // would make the result depend on the process count and on where each strategy keeps them.
  if (!sync_gradients()) return impl_->local_grad_norm(parameters, norm_type);
  // Gradients still whole (a backward not through accelerator.backward) go to their shards first,
  // so that the scaler unscales and this clips what the optimizers will step with.
  for (auto& shards : impl_->live_shards()) shards->reduce_gradients();
  unscale_gradients();
  const bool tensor_parallel = impl_->mesh != nullptr && impl_->mesh->config().tp_enabled();
  if (!impl_->sharded() && !tensor_parallel) {
    return torch::nn::utils::clip_grad_norm_(parameters, max_norm, norm_type);
  }
  return impl_->clip_split_grad_norm(parameters, max_norm, norm_type);
}

std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> Accelerator::Impl::gradient_parts(
    const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> pieces, rest = parameters;
  for (auto& shards : live_shards()) {
    std::vector<torch::Tensor> unheld;
    shards->shard_gradients_of(rest, pieces, unheld);
    rest = std::move(unheld);
  }
  std::vector<torch::Tensor> whole;
  for (const auto& p : rest) {
    if (p.grad().defined()) whole.push_back(p.grad());
  }
  return {std::move(pieces), std::move(whole)};
}

double Accelerator::Impl::clip_split_grad_norm(const std::vector<torch::Tensor>& parameters,
                                               double max_norm, double norm_type) {
  // The norm is the sum of every process's |g|^p (or the max of |g|, for p = inf) over the
  // parts of the gradients it holds, each part counted once over the mesh:
  // - a sharded strategy's pieces are combined over the processes the shards are cut among
  //   (under HYBRID_SHARD the replicas hold the same pieces); gradients no shard holds are alike
  //   on all of them, and counted by the first;
  // - a tensor-parallel slice is one process's part of a whole: its term is then summed over
  //   the tp group, while a parameter used whole is alike on every tp process, counted once.
  std::vector<torch::Tensor> sliced, plain;
  for (const auto& p : parameters)
    (detail::is_tensor_parallel_slice(p) ? sliced : plain).push_back(p);
  auto [sliced_pieces, sliced_whole] = gradient_parts(sliced);
  auto [plain_pieces, plain_whole] = gradient_parts(plain);
  const bool infinity = std::isinf(norm_type);
  const bool shard_combined = sharded() && shard_group() != nullptr;
  const bool counts_whole = !shard_combined || shard_group()->getRank() == 0;
  // terms[0]: the tensor-parallel slices' parts; terms[1]: the others'.
  auto terms = torch::zeros({2}, torch::dtype(torch::kFloat).device(device));
  auto add = [&](int64_t term, const torch::Tensor& grad) {
    auto norm = torch::linalg_vector_norm(grad.detach(), norm_type).to(device).to(torch::kFloat);
    auto slot = terms.narrow(0, term, 1);
    if (infinity) {
      slot.copy_(torch::maximum(slot, norm.reshape({1})));
    } else {
      slot.add_(norm.pow(norm_type).reshape({1}));
    }
  };
  for (const auto& g : sliced_pieces) add(0, g);
  for (const auto& g : plain_pieces) add(1, g);
  if (counts_whole) {
    for (const auto& g : sliced_whole) add(0, g);
    for (const auto& g : plain_whole) add(1, g);
  }
  const auto reduction = infinity ? Reduction::Max : Reduction::Sum;
  if (shard_combined) detail::all_reduce(*shard_group(), terms, reduction);
  if (mesh != nullptr && mesh->config().tp_enabled()) {
    auto slices = terms.narrow(0, 0, 1).clone();
    detail::all_reduce(*mesh->group(detail::MeshGroup::tp), slices, reduction);
    terms.narrow(0, 0, 1).copy_(slices);
  }
  const auto total = infinity ? terms.max() : terms.sum().pow(1.0 / norm_type);
  const auto coefficient = torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  torch::NoGradGuard no_grad;
  for (auto* parts : {&sliced_pieces, &sliced_whole, &plain_pieces, &plain_whole}) {
    for (auto& grad : *parts) grad.mul_(coefficient.to(grad.device()));
  }
  return total.item<double>();
}

double Accelerator::Impl::local_grad_norm(const std::vector<torch::Tensor>& parameters,
                                          double norm_type) const {
  // Each parameter's norm stays on the device; one transfer at the end, not one per parameter.
  std::vector<torch::Tensor> norms;
  for (const auto& p : parameters) {
    if (p.grad().defined()) {
      norms.push_back(torch::linalg_vector_norm(p.grad().detach(), norm_type).to(device));
    }
  }
  if (norms.empty()) return 0.0;
  double norm = torch::linalg_vector_norm(torch::stack(norms), norm_type).item<double>();
  if (const auto* scaler = gradient_state->scaler.get()) norm /= scaler->get_scale();
  return norm;
}

void Accelerator::clip_grad_value_(const std::vector<torch::Tensor>& parameters,
                                   double clip_value) {
  if (!sync_gradients()) return;
  for (auto& shards : impl_->live_shards()) shards->reduce_gradients();
  unscale_gradients();
  if (!impl_->sharded()) {
    torch::nn::utils::clip_grad_value_(parameters, clip_value);
    return;
  }
  // The shards hold the synchronised gradients (the parameters' own were freed).
  std::vector<torch::Tensor> pieces, rest = parameters;
  for (auto& shards : impl_->live_shards()) {
    std::vector<torch::Tensor> unheld;
    shards->shard_gradients_of(rest, pieces, unheld);
    rest = std::move(unheld);
  }
  torch::NoGradGuard no_grad;
  for (auto& piece : pieces) piece.clamp_(-clip_value, clip_value);
  for (const auto& p : rest) {
    if (p.grad().defined()) p.grad().clamp_(-clip_value, clip_value);
  }
}

// ---- Printing on the main process ---------------------------------------------------------------

std::ostream& Accelerator::main_process_only(std::ostream& stream) {
  if (is_main_process()) return stream;
  // An ostream without a buffer sets badbit on every write and formats nothing.
  static thread_local std::ostream discard(nullptr);
  discard.clear();
  return discard;
}

int Accelerator::printf(const char* format, ...) {
  if (!is_main_process()) return 0;
  va_list args;
  va_start(args, format);
  const int written = std::vprintf(format, args);
  va_end(args);
  return written;
}

int Accelerator::puts(const char* text) { return is_main_process() ? std::puts(text) : 0; }

// ---- Process control ----------------------------------------------------------------------------

void Accelerator::wait_for_everyone() {
  detail::CollectiveLabel collective_label("wait_for_everyone");
  if (impl_->distributed()) detail::barrier(impl_->device_group());
}

void Accelerator::set_trigger() { impl_->trigger = true; }

bool Accelerator::check_trigger() {
  detail::CollectiveLabel collective_label("check_trigger");
  auto flag = torch::tensor({impl_->trigger ? int64_t{1} : int64_t{0}}, torch::kInt64);
  if (impl_->distributed())
    detail::all_reduce(impl_->host_group(), flag, Reduction::Sum);  // a CPU flag
  if (flag.item<int64_t>() == 0) return false;
  impl_->trigger = false;
  return true;
}

void Accelerator::free_memory() {
  impl_->models.clear();
  impl_->step = 0;
#ifdef ACCEL_WITH_CUDA
  if (impl_->device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

void Accelerator::Impl::begin_join(const std::vector<const torch::nn::Module*>& models,
                                   std::optional<bool> even_batches) {
  TORCH_CHECK(join_models.empty(), "accel: join_uneven_inputs scopes do not nest");
  TORCH_CHECK(!sharded(),
              "accel: join_uneven_inputs works with data-parallel models "
              "(NO_SHARD); under ",
              options.sharding_strategy,
              " the optimizer's collectives would wait for the processes that ran out");
  for (const auto* model : models) {
    TORCH_CHECK(find(model) != nullptr,
                "accel: join_uneven_inputs was given a model that was not prepared");
  }
  TORCH_CHECK(!models.empty(), "accel: join_uneven_inputs needs the prepared models it joins");
  join_models = models;
  join_backwards = 0;
  gradient_state->even_batches_override = even_batches;
}

void Accelerator::Impl::end_join(const std::vector<const torch::nn::Module*>& models) {
  gradient_state->even_batches_override.reset();
  join_models.clear();
  if (!distributed()) return;
  // Each round: how many processes are still training (each counts itself in backward()). While
  // any is, shadow the all-reduces of its backward; when none is, every process leaves together.
  for (;;) {
    auto still_training = torch::zeros({1}, torch::kInt64);
    detail::all_reduce(host_group(), still_training, Reduction::Sum);
    if (still_training.item<int64_t>() == 0) break;
    for (const auto* model : models) {
      auto* prepared = find(model);
      if (prepared == nullptr || !prepared->sync) continue;
      prepared->sync->shadow_backward();
      prepared->sync->sync_buffers();
    }
  }
  // The processes that finished early skipped their last optimizer steps. As DDP's Join, every
  // process continues from the model of the one that trained longest (the highest rank among
  // equals).
  auto last = torch::tensor({join_backwards * dist->world_size() + dist->rank()});
  detail::all_reduce(host_group(), last, Reduction::Max);
  const int64_t authority = last.item<int64_t>() % dist->world_size();
  for (const auto* model : models) {
    auto* prepared = find(model);
    if (prepared != nullptr && prepared->sync) prepared->sync->broadcast_from(authority);
  }
}

}  // namespace accel
