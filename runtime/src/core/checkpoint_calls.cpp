// The Accelerator's checkpoint calls: what core hands the checkpoint subsystem (the run's state
// as CheckpointInputs, a model to save), and the small file helpers the public API keeps here.

#include "accelerator_impl.h"

#include "checkpoint/checkpoint_folders.h"
#include "checkpoint/save_model.h"
#include "checkpoint/training_state.h"
#include "parallel/tensor_parallel.h"
#include "sharding/module_tensors.h"
#include "util/collective_label.h"
#include "util/durable_file.h"

#include <c10/util/Exception.h>

#include <filesystem>

namespace accel {

namespace fs = std::filesystem;

checkpoints::CheckpointInputs Accelerator::Impl::checkpoint_inputs(Accelerator& accelerator) {
  checkpoints::CheckpointInputs run;
  run.process_index = dist->rank();
  run.num_processes = dist->world_size();
  run.main_process = accelerator.is_main_process();
  run.local_main_process = accelerator.is_local_main_process();
  run.wait_for_everyone = [&accelerator] { accelerator.wait_for_everyone(); };
  run.models = models.modules();
  run.optimizers = &loop->optimizers;
  run.stateful = &loop->stateful;
  run.shards = sharding.live();
  registrations.hand_to(run);
  run.move_optimizer_state = [&accelerator](torch::optim::Optimizer& optimizer) {
    accelerator.move_optimizer_state(optimizer);
  };
  run.gradient_accumulation_steps = accelerator.gradient_accumulation_steps();
  run.sharding_strategy = sharding.effective_strategy();
  run.sharded_optimizers = sharding.sharded();
  if (sharding.shards_parameters() &&
      options.fsdp.state_dict_type == StateDictType::ShardedStateDict) {
    // The processes the shards are cut among; HYBRID_SHARD's other machines hold the same ones.
    const auto& group = shard_group();
    const auto replicas = replicate_group();
    run.sharded_state_dict = checkpoints::CheckpointInputs::ShardedStateDict{
        group->getRank(), group->getSize(), replicas == nullptr || replicas->getRank() == 0};
  }
  if (const auto& config = options.parallelism_config) {
    run.mesh = {config->dp_replicate_size(), config->dp_shard_size(), config->cp_size(),
                config->tp_size(),           config->pp_size(),       true};
    if (mesh != nullptr) run.tp_rank = mesh->group(distributed::MeshGroup::tp)->getRank();
  }
  // Stages of a pipeline over several processes: their parameters' places in the whole model.
  if (pipelined() && !pipelines.empty()) run.pipeline = pipeline_checkpoint();
  run.project = &project;
  run.window = window.counters();
  run.in_window = !loop->sync.sync_gradients();
  run.restore_window = [this](const checkpoints::WindowCounters& counters, bool in_window) {
    window.restore(counters, in_window);
  };
  return run;
}

ProjectConfiguration& Accelerator::project_configuration() { return impl_->project; }
int64_t Accelerator::step() const { return impl_->window.step(); }
bool Accelerator::resumed() const { return impl_->resumed; }

void Accelerator::register_checkpoint_hooks(detail::CheckpointHooks hooks) {
  impl_->registrations.add_object(std::move(hooks));
}

RemovableHandle Accelerator::register_save_state_pre_hook(SaveStatePreHook hook) {
  return impl_->registrations.add_save_hook(std::move(hook));
}

RemovableHandle Accelerator::register_load_state_pre_hook(LoadStatePreHook hook) {
  return impl_->registrations.add_load_hook(std::move(hook));
}

void Accelerator::Impl::refuse_sharded_tensor_parallel_state(const char* call) const {
  if (!sharding.shards_parameters() ||
      options.fsdp.state_dict_type != StateDictType::ShardedStateDict) {
    return;
  }
  // Checked alike on every process (each holds slices of the same parameters): none hangs.
  for (const auto* module : models.modules()) {
    for (const auto& p : module->parameters()) {
      TORCH_CHECK(!parallel::is_tensor_parallel_slice(p), "accel: ", call,
                  " of a tensor-parallel model with fsdp_state_dict_type SHARDED_STATE_DICT is "
                  "not supported (its shards would be cut from the tensor-parallel slices); use "
                  "FULL_STATE_DICT, which writes the weights whole and loads on any layout");
    }
  }
}

std::string Accelerator::save_state(const std::string& requested_dir) {
  ACCEL_METHOD_LABEL("save_state");
  impl_->refuse_sharded_tensor_parallel_state("save_state");
  const auto dir = checkpoints::save_state(impl_->checkpoint_inputs(*this), requested_dir);
  impl_->project.iteration(impl_->project.iteration() + 1);
  return dir;
}

void Accelerator::load_state(const std::string& requested_dir, const LoadStateOptions& options) {
  ACCEL_METHOD_LABEL("load_state");
  impl_->refuse_sharded_tensor_parallel_state("load_state");
  const auto iteration =
      checkpoints::load_state(impl_->checkpoint_inputs(*this), requested_dir, options);
  if (iteration) impl_->project.iteration(*iteration);
}

bool Accelerator::resume_if_possible() {
  ACCEL_METHOD_LABEL("resume_if_possible");
  if (!impl_->options.resume) return false;
  // Every process decides from the main process's view of the folder, so all load or none do.
  const bool found = broadcast_object(checkpoints::has_numbered_checkpoint(impl_->project));
  if (!found) return false;
  load_state();
  impl_->resumed = true;
  return true;
}

void Accelerator::save_module(const torch::nn::Module& module, const std::string& dir,
                              const SaveModelOptions& options) {
  ACCEL_METHOD_LABEL("save_model");
  if (impl_->pipelined() && impl_->pipelines.count(&module) > 0) {
    // A pipeline's stages are on several processes: the whole model is gathered from them.
    checkpoints::save_model_tensors(impl_->gather_pipeline_tensors(module), dir, options,
                                    is_main_process());
  } else {
    checkpoints::save_model(module, dir, options, is_main_process());
  }
  wait_for_everyone();
}

bool Accelerator::writes_files() const {
  return impl_->project.save_on_each_node() ? is_local_main_process() : is_main_process();
}

void Accelerator::write_saved(const std::string& path, const std::string& bytes) {
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  util::write_file_durably(path, bytes);
}

void Accelerator::save(const std::map<std::string, torch::Tensor>& tensors,
                       const std::string& path) {
  if (!writes_files()) return;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  save_safetensors(path, NamedTensors(tensors.begin(), tensors.end()));
}

NamedTensors Accelerator::state_dict_of(const torch::nn::Module& module) {
  ACCEL_METHOD_LABEL("get_state_dict");
  if (impl_->pipelined() && impl_->pipelines.count(&module) > 0) {
    return impl_->gather_pipeline_tensors(module);
  }
  if (sharding::has_sharded_parameters(module)) {
    return sharding::module_tensors_to_save(module, is_main_process());
  }
  NamedTensors tensors = sharding::module_tensors(module);
  for (auto& entry : tensors) entry.second = entry.second.detach();
  return tensors;
}

}  // namespace accel
