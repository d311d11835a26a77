// What Accelerator::prepare(optimizer) asks of the Accelerator
// (accel/detail/optimizer_preparation.h): the optimizer's state moved where its parameters are, its
// shards under a sharding strategy, and with ACCEL_DEBUG a word on which step it takes.

#include <accel/accelerator.h>

#include "accelerator_impl.h"
#include "optim/exact_step_check.h"
#include "sharding/optimizer_state_tensors.h"

#include <c10/util/Type.h>

#include <cstdio>
#include <string>
#include <unordered_map>

namespace accel {

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
    const auto tensors = sharding::elementwise_state(*entry.second);
    if (!tensors) continue;
    for (auto* t : *tensors) {
      if (t->defined()) *t = t->to(device);
    }
  }
}

std::shared_ptr<detail::ShardedStep> Accelerator::shard_optimizer(
    torch::optim::Optimizer& optimizer) {
  if (!impl_->sharding.sharded()) return nullptr;
  sharding::ShardingSetup::Placement placement;
  placement.shard_group = impl_->shard_group();
  placement.replicate_group = impl_->replicate_group();
  placement.gloo = impl_->dist->backend() == distributed::CollectiveBackend::gloo;
  placement.device = impl_->device;
  return impl_->sharding.shard(optimizer, impl_->models.modules(), placement);
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
    why = optim::exact_cpu_step_refusal(*optimizer);
    if (!why.empty()) why = "; the CPU's exact kernels are not used: " + why;
  }
  std::fprintf(stderr, "accel: prepared optimizer %s steps %s%s\n",
               c10::demangle(mangled_type).c_str(), path, why.c_str());
}

}  // namespace accel
