#pragma once

// Every public method of accel::Accelerator (and of the groups it inherits: ProcessControl,
// CollectiveMethods, DataLoaderPreparation, OptimizerPreparation, CheckpointMethods) and how it
// takes part in the job. One table for the two readers that must agree: the runtime names its
// calls in the flight record from it (ACCEL_METHOD_LABEL, checked when compiled), and
// accel-migrate's analyses read which calls communicate, combine every process's values, or
// name this process (ProcessDivergence, GatherForMetricsCheck).
//
// test/layout/accelerator_methods.py fails when a public method is missing here (a new method
// must be given its role), when an entry is not a public method, and when a call label of core/
// is not written through ACCEL_METHOD_LABEL.

#include <cstddef>
#include <string_view>

namespace accel {
namespace contract {

enum class MethodRole {
  /// Runs on this process alone.
  local,
  /// Runs on this process alone, and its answer names this process or hands it its own part of
  /// the data: it differs between processes.
  identity,
  /// Every process must call it together (it communicates, or may under some strategy: forward,
  /// backward and clipping under sharding, which is chosen at launch, not in the source).
  collective,
  /// Collective, and its result is the same on every process: it combines their values.
  combining,
};

struct AcceleratorMethod {
  std::string_view name;
  MethodRole role;
  /// Combines every process's tensors into one result (gather, gather_for_metrics, reduce).
  bool gathers_tensors = false;
};

inline constexpr AcceleratorMethod kAcceleratorMethods[] = {
    // Process identity
    {"current", MethodRole::local},
    {"has_current", MethodRole::local},
    {"device", MethodRole::local},
    {"process_index", MethodRole::identity},
    {"local_process_index", MethodRole::identity},
    {"num_processes", MethodRole::local},
    {"local_num_processes", MethodRole::local},
    {"is_main_process", MethodRole::identity},
    {"is_local_main_process", MethodRole::identity},
    {"is_last_process", MethodRole::identity},
    {"data_parallel_rank", MethodRole::identity},
    {"data_parallel_shard_rank", MethodRole::identity},
    {"tensor_parallel_rank", MethodRole::identity},
    {"context_parallel_rank", MethodRole::identity},
    {"pipeline_parallel_rank", MethodRole::identity},
    {"parallelism_config", MethodRole::local},
    {"options", MethodRole::local},
    {"gradient_accumulation_steps", MethodRole::local},
    {"mixed_precision", MethodRole::local},
    {"fp8_backend", MethodRole::local},
    {"scaler", MethodRole::local},
    // prepare
    {"prepare", MethodRole::collective},
    {"prepare_data_loader", MethodRole::collective},
    {"prepare_pipeline", MethodRole::collective},
    {"maybe_context_parallel", MethodRole::local},
    // The training loop
    {"backward", MethodRole::collective},
    {"accumulate", MethodRole::local},
    {"accumulate_until", MethodRole::local},
    {"autocast", MethodRole::local},
    {"forward", MethodRole::collective},
    {"optimizer_step_was_skipped", MethodRole::local},
    {"sync_gradients", MethodRole::local},
    {"gradient_all_reduces", MethodRole::local},
    {"end_of_dataloader", MethodRole::local},
    {"no_sync", MethodRole::local},
    {"trigger_sync_in_backward", MethodRole::local},
    {"clip_grad_norm_", MethodRole::collective},
    {"clip_grad_value_", MethodRole::collective},
    {"unscale_gradients", MethodRole::collective},  // found-inf over the shards' processes
    // Distributed operations
    {"gather", MethodRole::combining, true},
    {"gather_for_metrics", MethodRole::combining, true},
    {"gather_object", MethodRole::combining},
    {"reduce", MethodRole::combining, true},
    {"broadcast", MethodRole::combining},
    {"broadcast_object", MethodRole::combining},
    {"pad_across_processes", MethodRole::collective},
    {"split_between_processes", MethodRole::identity},
    // Process control
    {"wait_for_everyone", MethodRole::collective},
    {"main_process_first", MethodRole::collective},
    {"local_main_process_first", MethodRole::collective},
    {"main_process_only", MethodRole::local},
    {"printf", MethodRole::local},
    {"puts", MethodRole::local},
    {"print", MethodRole::local},
    {"on_main_process", MethodRole::local},
    {"on_local_main_process", MethodRole::local},
    {"on_last_process", MethodRole::local},
    {"on_process", MethodRole::local},
    {"on_local_process", MethodRole::local},
    {"profile", MethodRole::collective},
    {"join_uneven_inputs", MethodRole::collective},
    {"set_trigger", MethodRole::local},
    {"check_trigger", MethodRole::combining},
    {"skip_first_batches", MethodRole::local},
    {"unwrap_model", MethodRole::local},
    {"free_memory", MethodRole::local},
    {"clear", MethodRole::local},
    // Checkpointing
    {"save_model", MethodRole::collective},
    {"save_state", MethodRole::collective},
    {"load_state", MethodRole::collective},
    {"resume_if_possible", MethodRole::collective},
    {"resumed", MethodRole::local},
    {"register_for_checkpointing", MethodRole::local},
    {"register_save_state_pre_hook", MethodRole::local},
    {"register_load_state_pre_hook", MethodRole::local},
    {"save", MethodRole::local},
    {"get_state_dict", MethodRole::collective},
    {"project_configuration", MethodRole::local},
    {"step", MethodRole::local},
    // Experiment tracking
    {"init_trackers", MethodRole::local},
    {"log", MethodRole::local},
    {"get_tracker", MethodRole::local},
    {"end_training", MethodRole::local},
};

/// The entry of the public method `name`; null when there is none.
constexpr const AcceleratorMethod* find_accelerator_method(std::string_view name) {
  for (const auto& method : kAcceleratorMethods) {
    if (method.name == name) return &method;
  }
  return nullptr;
}

/// Whether `name` is a public method of the table. Answers without a pointer, so that it stays a
/// constant expression under -fsanitize=undefined, whose null checks make GCC refuse a compared
/// pointer into the table (ACCEL_METHOD_LABEL's static_assert).
constexpr bool is_accelerator_method(std::string_view name) {
  for (const auto& method : kAcceleratorMethods) {
    if (method.name == name) return true;
  }
  return false;
}

/// Every process must call it together (collective or combining).
constexpr bool is_collective_method(std::string_view name) {
  const auto* method = find_accelerator_method(name);
  return method != nullptr &&
         (method->role == MethodRole::collective || method->role == MethodRole::combining);
}

constexpr bool has_role(std::string_view name, MethodRole role) {
  const auto* method = find_accelerator_method(name);
  return method != nullptr && method->role == role;
}

}  // namespace contract
}  // namespace accel
