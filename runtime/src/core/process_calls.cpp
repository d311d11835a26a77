// The Accelerator's process calls: this process's identity and mesh coordinates, printing on the
// main process, and the calls every process makes together (wait_for_everyone, triggers).

#include <accel/accelerator.h>

#include "accelerator_impl.h"
#include "distributed/collectives.h"
#include "util/collective_label.h"

#include <c10/util/Exception.h>

#include <cstdarg>
#include <cstdio>
#include <string>

namespace accel {

// ---- Identity -----------------------------------------------------------------------------------

torch::Device Accelerator::device() const { return impl_->device; }
int64_t Accelerator::process_index() const { return impl_->dist->rank(); }
int64_t Accelerator::local_process_index() const { return impl_->dist->identity().local_rank; }
int64_t Accelerator::num_processes() const { return impl_->dist->world_size(); }
int64_t Accelerator::local_num_processes() const {
  return impl_->dist->identity().local_world_size;
}

void Accelerator::Impl::form_mesh() {
  auto& config = *options.parallelism_config;
  const int64_t processes = dist->world_size();
  // Accelerate's rule: a config that leaves every size at 1 is plain data parallelism.
  if (config.total_size() == 1) config.dp_replicate_size(processes);
  TORCH_CHECK(
      config.total_size() == processes, "accel: parallelism_config's sizes (",
      config.pp_enabled() ? "pp_size " + std::to_string(config.pp_size()) + " x " : std::string(),
      "dp_replicate_size ", config.dp_replicate_size(), " x dp_shard_size ", config.dp_shard_size(),
      " x tp_size ", config.tp_size(), " x cp_size ", config.cp_size(), " = ", config.total_size(),
      ") do not multiply to the ", processes, " processes of this job",
      config.pp_enabled() && processes % config.pp_size() != 0
          ? " (pp_size " + std::to_string(config.pp_size()) + " does not divide them)"
          : std::string());
  if (distributed()) mesh = &dist->mesh(config, group_settings());
}

int64_t Accelerator::Impl::mesh_coordinate(distributed::MeshDim dim, const char* method) const {
  TORCH_CHECK(options.parallelism_config.has_value(), "accel: ", method,
              "() needs a device mesh; set AcceleratorOptions::parallelism_config, or launch "
              "with --use_parallelism_config");
  return mesh != nullptr ? mesh->coordinate(dim) : 0;
}

int64_t Accelerator::data_parallel_rank() const {
  return impl_->mesh_coordinate(distributed::MeshDim::dp_replicate, "data_parallel_rank");
}
int64_t Accelerator::data_parallel_shard_rank() const {
  return impl_->mesh_coordinate(distributed::MeshDim::dp_shard, "data_parallel_shard_rank");
}
int64_t Accelerator::tensor_parallel_rank() const {
  return impl_->mesh_coordinate(distributed::MeshDim::tp, "tensor_parallel_rank");
}
int64_t Accelerator::context_parallel_rank() const {
  return impl_->mesh_coordinate(distributed::MeshDim::cp, "context_parallel_rank");
}
int64_t Accelerator::pipeline_parallel_rank() const {
  return impl_->mesh_coordinate(distributed::MeshDim::pp, "pipeline_parallel_rank");
}
const std::optional<ParallelismConfig>& Accelerator::parallelism_config() const {
  return impl_->options.parallelism_config;
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
  ACCEL_METHOD_LABEL("wait_for_everyone");
  if (impl_->distributed()) distributed::barrier(impl_->device_group());
}

void Accelerator::set_trigger() { impl_->trigger = true; }

bool Accelerator::check_trigger() {
  ACCEL_METHOD_LABEL("check_trigger");
  auto flag = torch::tensor({impl_->trigger ? int64_t{1} : int64_t{0}}, torch::kInt64);
  if (impl_->distributed())
    distributed::all_reduce(impl_->host_group(), flag, Reduction::Sum);  // a CPU flag
  if (flag.item<int64_t>() == 0) return false;
  impl_->trigger = false;
  return true;
}

}  // namespace accel
