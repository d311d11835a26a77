// The Accelerator's construction (options resolved, process groups and mesh formed, mixed
// precision checked), autocast, prepare(model), and free_memory. The other calls live beside
// the part of the Accelerator they use: process_calls.cpp, optimizer_calls.cpp,
// loader_context.cpp, backward.cpp, gradient_calls.cpp, gather_reduce.cpp, checkpoint_calls.cpp,
// tracking_calls.cpp, scopes.cpp.

#include <accel/accelerator.h>

#include <accel/activation_checkpoint.h>
#include <accel/fp8.h>

#include "accelerator_impl.h"
#include "current_accelerator.h"
#include "distributed/collectives.h"
#include "parallel/tensor_parallel.h"
#include "step_checks.h"
#include "util/collective_label.h"
#include "util/torch_compat.h"

#ifdef ACCEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <utility>

namespace accel {

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
    TORCH_CHECK(util::autocast_supports(device.type(), c10::ScalarType::BFloat16),
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

/// What sharding/ needs of the options.
sharding::ShardingSettings sharding_settings(const ResolvedOptions& options, bool distributed) {
  sharding::ShardingSettings settings;
  settings.strategy = options.sharding_strategy;
  settings.distributed = distributed;
  settings.offload = options.fsdp.offload_params;
  settings.wrap_classes = options.fsdp.transformer_layer_cls_to_wrap;
  settings.min_num_params = options.fsdp.min_num_params;
  settings.units_by_use = *options.ddp.find_unused_parameters() || *options.ddp.static_graph();
  settings.unit_bytes = options.ddp.bucket_cap_mb() << 20;
  if (options.fsdp.reduce_dtype == ReduceDtype::Bf16) settings.reduce_dtype = at::kBFloat16;
  if (options.fsdp.reduce_dtype == ReduceDtype::Fp16) settings.reduce_dtype = at::kHalf;
  settings.forward_prefetch = options.fsdp.forward_prefetch;
  settings.backward_prefetch = options.fsdp.backward_prefetch;
  return settings;
}

}  // namespace

Accelerator::Impl::Impl(ResolvedOptions resolved)
    : options(std::move(resolved)),
      dist(distributed::DistributedState::get(group_settings())),
      device(dist->device(options.cpu)),
      sharding(sharding_settings(options, dist->world_size() > 1)),
      project(options.project_config),
      trackers(dist->rank() == 0) {}

Accelerator::Accelerator(AcceleratorOptions options, detail::SourcePlace created_at)
    : impl_(std::make_unique<Impl>(resolve_options(options))) {
  TORCH_CHECK(
      !(impl_->dist->backend() == distributed::CollectiveBackend::nccl && impl_->device.is_cpu()),
      "accel: this process's group uses NCCL (created by an earlier Accelerator); an "
      "Accelerator with cpu=true cannot share it");
#ifdef ACCEL_WITH_CUDA
  if (impl_->device.is_cuda()) c10::cuda::set_device(impl_->device.index());
#endif
  check_mixed_precision_available(impl_->options.mixed_precision, impl_->device);
  // Every process constructs its Accelerator at the same point: the groups' rendezvous.
  if (impl_->options.parallelism_config) {
    impl_->form_mesh();
  } else if (impl_->sharding.hybrid()) {
    impl_->dist->hybrid_groups(impl_->group_settings());
  }
  impl_->loop->optimizers.set_fused(impl_->options.fused_optimizer);
  if (impl_->distributed()) {
    impl_->loop->checks.refuse_unaveraged(!impl_->options.allow_unprepared_parameters);
    // The check compares every process's parameters: a pipeline's stages (and tensor-parallel
    // slices) are different parameters on different processes by design.
    if (impl_->options.debug && !impl_->pipelined() && !impl_->tensor_parallel()) {
      impl_->loop->checks.set_comparison(core::parameter_comparison(impl_->dist));
    }
  }
  if (impl_->options.mixed_precision == MixedPrecision::Fp16)
    impl_->loop->optimizers.set_scaler(impl_->make_fp16_scaler());
  core::register_accelerator(*this, created_at);
}

std::shared_ptr<GradScaler> Accelerator::Impl::make_fp16_scaler() const {
  auto scaler = std::make_shared<GradScaler>(options.grad_scaler);
  if ((sharding.sharded() || pipelined()) && distributed()) {
    // Each process checks only its own gradient shard (or its stages' gradients); all must skip
    // or step together.
    scaler->set_found_inf_reduction([dist = this->dist](bool found) {
      auto flag = torch::tensor({found ? int64_t{1} : int64_t{0}}, torch::kInt64);
      distributed::all_reduce(*dist->host_group(), flag, Reduction::Max);
      return flag.item<int64_t>() > 0;
    });
  }
  return scaler;
}

Accelerator::~Accelerator() {
  core::unregister_accelerator(*this);
  try {
    end_training();
  } catch (...) {
    // A destructor does not throw; end_training reports a tracker's failure itself.
  }
}

const ResolvedOptions& Accelerator::options() const { return impl_->options; }
std::shared_ptr<detail::TrainingLoop> Accelerator::training_loop() const { return impl_->loop; }
GradScaler* Accelerator::scaler() const { return impl_->loop->optimizers.scaler(); }

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

// ---- prepare ------------------------------------------------------------------------------------

// prepare(model)'s composition, torchtitan's parallelize in the runtime's terms: each step a
// function over its named group of the mesh, in this order (prepare_pipeline cuts the model
// first, then gives each process's stages the same steps):
//   place             the model on the device (or, empty, left for FULL_SHARD to fill);
//   broadcast_model   rank 0's tensors to every process, where a split needs them alike;
//   activation checkpointing (fsdp_activation_checkpointing);
//   tensor parallelism, over the tp group;
//   FP8, after the split (the slices convert);
//   data parallelism: gradients averaged over the gradient group (dp_replicate × dp_shard × cp)
//     in backward, or after a pipeline's schedule;
//   sharding: prepare(optimizer) cuts the parameters and optimizer state over the shard group.
void Accelerator::prepare_model(torch::nn::Module& model, const TensorParallelPlan* plan) {
  ACCEL_METHOD_LABEL("prepare");
  if (impl_->models.contains(&model)) return;
  impl_->place(model);
  if (plan != nullptr && impl_->tensor_parallel()) impl_->broadcast_model(model);
  impl_->prepare_parts(model, plan, /*pipeline=*/false);
}

void Accelerator::Impl::place(torch::nn::Module& model) {
  const auto parameters = model.parameters();
  const bool empty = std::any_of(parameters.begin(), parameters.end(),
                                 [](const torch::Tensor& p) { return p.is_meta(); });
  if (empty) {
    // Built with init_empty_weights: under FULL_SHARD the parameters stay empty until
    // prepare(optimizer) gives each process its zero shards on the device and a load fills them;
    // no process holds the whole model at any time.
    TORCH_CHECK(sharding.shards_parameters(),
                "accel: the model has empty parameters (init_empty_weights); prepare() can take "
                "it so only under FULL_SHARD or HYBRID_SHARD on several processes (sharding "
                "strategy here: ",
                sharding.effective_strategy(),
                "). Otherwise fill it first: accel::load_checkpoint_in_model, or "
                "load_checkpoint_and_dispatch for inference");
    if (options.device_placement) {
      torch::NoGradGuard no_grad;
      for (auto& buffer : model.buffers()) {
        if (!buffer.is_meta()) buffer.set_data(buffer.to(device));
      }
    }
  } else if (options.device_placement) {
    model.to(device);
  }
}

void Accelerator::Impl::broadcast_model(torch::nn::Module& model) {
  if (!distributed()) return;
  std::vector<torch::Tensor> states;
  for (const auto& p : model.parameters()) states.push_back(p);
  for (const auto& b : model.buffers()) states.push_back(b);
  if (states.empty()) return;
  torch::NoGradGuard no_grad;
  c10d::broadcast_coalesced(dist->device_group(), states, 1 << 24, 0);
}

void Accelerator::Impl::prepare_parts(torch::nn::Module& model, const TensorParallelPlan* plan,
                                      bool pipeline) {
  if (options.fsdp.activation_checkpointing) {
    detail::apply_activation_checkpointing(model, options.fsdp.transformer_layer_cls_to_wrap,
                                           options.fsdp.activation_checkpointing_policy);
  }
  if (plan != nullptr) apply_tensor_parallel(model, *plan, /*checked=*/pipeline);
  if (options.mixed_precision == MixedPrecision::Fp8) {
    TORCH_CHECK(plan == nullptr || !tensor_parallel(),
                "accel: mixed_precision 'fp8' with tensor parallelism (tp_size ",
                mesh->config().tp_size(),
                ") is not supported yet: FP8 casts of tensor-parallel slices need their scales "
                "reduced over the group. Train this mesh in bf16, or fp8 without tp");
    convert_to_fp8(model, options.fp8);
  }
  core::PreparedModel prepared;
  prepared.module = &model;
  if (distributed()) {
    loop->checks.record_averaged(model, models.size());
    // ZeRO-2's and ZeRO-3's optimizers (and HYBRID_SHARD's) reduce-scatter the gradients in
    // backward; the other strategies all-reduce them during it. A pipeline's stages run many
    // backwards a step: theirs are averaged after the schedule (synchronise_gradients).
    // A gradient group of one process (tensor parallelism over the whole job) has nothing to
    // average: no reducer, whose buckets would hold a second copy of the gradients.
    if (!pipeline && gradient_group()->getSize() > 1) {
      prepared.sync = std::make_unique<distributed::GradientSynchronizer>(
          model, gradient_group(), host_group(), options.ddp, all_reduces_gradients());
    }
  }
  models.add(std::move(prepared));
}

void Accelerator::Impl::apply_tensor_parallel(torch::nn::Module& model,
                                              const TensorParallelPlan& plan, bool checked) {
  if (!tensor_parallel()) {
    // Ignored where nothing is split, so one program runs on every layout; still checked.
    if (!checked) parallel::check_tensor_parallel_plan(model, plan, 1);
    return;
  }
  parallel::apply_tensor_parallel_plan(model, plan, mesh->group(distributed::MeshGroup::tp));
}

const c10::intrusive_ptr<c10d::ProcessGroup>& Accelerator::Impl::shard_group() const {
  if (mesh != nullptr) return mesh->group(distributed::MeshGroup::shard);
  if (sharding.hybrid()) return dist->hybrid_groups(group_settings()).shard;
  // One process has a group only to shard (CPU offload); null otherwise, as the job's groups.
  return distributed() || !sharding.sharded() ? dist->device_group()
                                              : dist->single_process_group(group_settings());
}

c10::intrusive_ptr<c10d::ProcessGroup> Accelerator::Impl::replicate_group() const {
  if (mesh != nullptr) {
    return sharding.hybrid() ? mesh->group(distributed::MeshGroup::dp_replicate) : nullptr;
  }
  return sharding.hybrid() ? dist->hybrid_groups(group_settings()).replicate : nullptr;
}

void Accelerator::free_memory() {
  impl_->models.clear();
  impl_->pipelines.clear();
  impl_->window.reset_step();
#ifdef ACCEL_WITH_CUDA
  if (impl_->device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

}  // namespace accel
