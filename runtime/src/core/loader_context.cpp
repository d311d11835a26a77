// What a prepared data loader gets from its Accelerator (detail::LoaderContext): its share of
// the batches, the device, and the collectives that keep shuffling and streams alike on every
// process.

#include <accel/accelerator.h>

#include "accelerator_impl.h"
#include "distributed/collectives.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <mutex>
#include <vector>

namespace accel {

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
      distributed::broadcast(impl->host_group(), shared, 0);  // a CPU generator state
      return shared;
    };
    context.broadcast_from_main = [impl](const c10::IValue& value) {
      return distributed::broadcast_ivalue(impl->host_group(), value, 0);
    };
    context.gather_values = [impl](const c10::IValue& value) {
      return distributed::all_gather_ivalues(impl->host_group(), value);
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
          distributed::broadcast(impl->host_group(), state, 0);
          generator.set_state(state);
        }
      };
    }
  }
  context.device = impl_->device;
  context.device_placement = impl_->options.device_placement;
  context.loop = impl_->loop;
  return context;
}

}  // namespace accel
