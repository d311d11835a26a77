// What a program asks of, and does to, the gradients between backward() and the optimizer's
// step: whether this micro-step synchronises, the counts of what was synchronised, unscaling and
// clipping. Both clip calls follow one rule: they act on the synchronised gradients only.

#include <accel/accelerator.h>

#include "accelerator_access.h"
#include "accelerator_impl.h"
#include "gradient_clipping.h"
#include "util/collective_label.h"

#include <torch/nn/utils/clip_grad.h>

namespace accel {

bool Accelerator::sync_gradients() const { return impl_->loop->sync.sync_gradients(); }
bool Accelerator::end_of_dataloader() const { return impl_->loop->loader.end_of_dataloader(); }
bool Accelerator::optimizer_step_was_skipped() const {
  return impl_->loop->sync.step_was_skipped();
}

int64_t Accelerator::gradient_all_reduces() const { return impl_->models.gradient_all_reduces(); }

detail::CompressedGradientBytes detail::AcceleratorAccess::compressed_gradient_bytes(
    const Accelerator& accelerator) {
  const auto [buckets, sent] = accelerator.impl_->models.compressed_bytes();
  return {buckets, sent};
}

void detail::AcceleratorAccess::use_fp16_scaler(Accelerator& accelerator) {
  accelerator.impl_->loop->optimizers.set_scaler(accelerator.impl_->make_fp16_scaler());
}

void Accelerator::trigger_sync(const torch::nn::Module* model) { impl_->models.force_sync(model); }

void Accelerator::unscale_gradients() {
  auto* scaler = this->scaler();
  // Only on synchronisation steps: the scaler unscales once per optimizer step.
  if (scaler == nullptr || !sync_gradients()) return;
  for (auto* gate : impl_->loop->optimizers.gates()) {
    if (!scaler->unscaled(*gate->optimizer())) scaler->unscale_(*gate->optimizer());
  }
}

namespace {

/// The clip calls' first step on a synchronising micro-step: gradients still whole (a backward
/// not through accelerator.backward) go to their shards, and the scaler unscales, so that what
/// is clipped is what the optimizers will step with. Returns the live shards.
std::vector<std::shared_ptr<sharding::OptimizerShards>> synchronised_gradients(
    Accelerator& accelerator, const sharding::ShardingSetup& sharding) {
  auto shards = sharding.live();
  for (auto& optimizer_shards : shards) optimizer_shards->reduce_gradients();
  accelerator.unscale_gradients();
  return shards;
}

}  // namespace

double Accelerator::clip_grad_norm_(const std::vector<torch::Tensor>& parameters, double max_norm,
                                    double norm_type) {
  ACCEL_METHOD_LABEL("clip_grad_norm_");
  // Inside an accumulation window the gradients are partial and each process's own: clipping them
  // would make the result depend on the process count and on where each strategy keeps them.
  if (!sync_gradients()) {
    const double scale = scaler() != nullptr ? scaler()->get_scale() : 1.0;
    return core::local_grad_norm(parameters, norm_type, impl_->device, scale);
  }
  const auto shards = synchronised_gradients(*this, impl_->sharding);
  const bool sharded = impl_->sharding.sharded();
  if (!sharded && !impl_->tensor_parallel() && !impl_->pipelined()) {
    return torch::nn::utils::clip_grad_norm_(parameters, max_norm, norm_type);
  }
  core::SplitNormGroups groups;
  if (sharded) groups.shard_group = impl_->shard_group().get();
  if (impl_->tensor_parallel())
    groups.tp_group = impl_->mesh->group(distributed::MeshGroup::tp).get();
  if (impl_->pipelined()) groups.pp_group = impl_->mesh->group(distributed::MeshGroup::pp).get();
  return core::clip_split_grad_norm(shards, parameters, max_norm, norm_type, groups, impl_->device);
}

void Accelerator::clip_grad_value_(const std::vector<torch::Tensor>& parameters,
                                   double clip_value) {
  if (!sync_gradients()) return;
  const auto shards = synchronised_gradients(*this, impl_->sharding);
  if (!impl_->sharding.sharded()) {
    torch::nn::utils::clip_grad_value_(parameters, clip_value);
    return;
  }
  // The shards hold the synchronised gradients (the parameters' own were freed).
  auto held = core::held_gradients(shards, parameters);
  torch::NoGradGuard no_grad;
  for (auto* parts : {&held.pieces, &held.whole}) {
    for (auto& grad : *parts) grad.clamp_(-clip_value, clip_value);
  }
}

}  // namespace accel
