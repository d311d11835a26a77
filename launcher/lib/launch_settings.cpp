#include "launch_settings.h"

#include "accel_common/contract.h"
#include "accel_common/slurm_nodelist.h"

#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <utility>

namespace accel {
namespace launcher {
namespace {

// A malformed number is an error naming the variable, as in the runtime, which reads the same
// variables through the same parser.
std::optional<int> env_int(const EnvLookup& env, const std::string& name) {
  auto value = env(name);
  if (!value) return std::nullopt;
  const auto parsed = contract::parse_integer(*value);
  if (!parsed || *parsed < std::numeric_limits<int>::min() ||
      *parsed > std::numeric_limits<int>::max()) {
    throw std::invalid_argument(name + "='" + *value + "' is not a whole number");
  }
  return static_cast<int>(*parsed);
}

// The first of the values that is set.
template <typename T>
std::optional<T> first_of(const std::optional<T>& value) {
  return value;
}
template <typename T, typename... Rest>
std::optional<T> first_of(const std::optional<T>& value, const Rest&... rest) {
  return value ? value : first_of(rest...);
}

}  // namespace

std::optional<std::string> process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

Config job_environment(const EnvLookup& env) {
  Config e;
  if (env(contract::kSlurmJobId)) e.num_machines = env_int(env, contract::kSlurmNodes);
  if (e.num_machines) {
    e.machine_rank = env_int(env, contract::kSlurmNodeId);
    auto nodes = env(contract::kSlurmJobNodeList);
    if (!nodes) nodes = env(contract::kSlurmNodeList);
    if (nodes) e.main_process_ip = detail::first_slurm_host(*nodes);
  }
  if (auto addr = env(contract::kMasterAddr)) e.main_process_ip = addr;
  if (auto port = env_int(env, contract::kMasterPort)) e.main_process_port = port;
  return e;
}

LaunchOptions resolve_launch_options(const LaunchArgs& a, const Config& file, const Config& e,
                                     std::vector<std::string>* warnings) {
  const Config c = merge_sharding(config_of_flags(a.sharding, file.fsdp_version), file);
  if (warnings != nullptr) {
    for (auto& warning : unapplied_fsdp_settings(c)) warnings->push_back(std::move(warning));
  }
  LaunchOptions o;
  o.num_machines = first_of(a.num_machines, e.num_machines, c.num_machines).value_or(1);
  o.num_processes = first_of(a.num_processes, c.num_processes).value_or(o.num_machines);
  o.machine_rank = first_of(a.machine_rank, e.machine_rank, c.machine_rank).value_or(0);
  o.main_process_ip = first_of(a.main_process_ip, e.main_process_ip, c.main_process_ip)
                          .value_or(std::string("127.0.0.1"));
  o.main_process_port = first_of(a.main_process_port, e.main_process_port, c.main_process_port);
  o.mixed_precision = first_of(a.mixed_precision, c.mixed_precision);
  o.fp8_backend = first_of(a.fp8_backend, c.fp8_backend);
  o.gradient_accumulation_steps =
      first_of(a.gradient_accumulation_steps, c.gradient_accumulation_steps);
  o.gpu_ids = first_of(a.gpu_ids, c.gpu_ids);
  o.sharding_strategy = c.sharding_strategy;
  // Accelerate's auto-wrap policy picks which of the two unit settings applies; without one, the
  // classes do (its default is the transformer policy).
  const std::string policy = c.auto_wrap_policy.value_or(
      c.classes_to_wrap || !c.min_num_params ? "TRANSFORMER_BASED_WRAP" : "SIZE_BASED_WRAP");
  if (policy == "TRANSFORMER_BASED_WRAP") o.classes_to_wrap = c.classes_to_wrap;
  if (policy == "SIZE_BASED_WRAP") o.min_num_params = c.min_num_params.value_or(100000000);
  o.state_dict_type = c.state_dict_type;
  o.offload_params = c.offload_params;
  o.activation_checkpointing = c.activation_checkpointing;
  o.find_unused_parameters = c.find_unused_parameters;
  o.static_graph = c.static_graph;
  o.comm_hook = c.comm_hook;
  o.forward_prefetch = c.forward_prefetch;
  const bool mesh_flags = a.use_parallelism_config || a.dp_replicate_size || a.dp_shard_size ||
                          a.tp_size || a.cp_size || a.pp_size;
  if (mesh_flags || c.dp_replicate_size || c.dp_shard_size || c.tp_size || c.cp_size || c.pp_size) {
    LaunchOptions::MeshSizes mesh;
    mesh.dp_replicate = first_of(a.dp_replicate_size, c.dp_replicate_size).value_or(1);
    mesh.dp_shard = first_of(a.dp_shard_size, c.dp_shard_size).value_or(1);
    mesh.tp = first_of(a.tp_size, c.tp_size).value_or(1);
    mesh.cp = first_of(a.cp_size, c.cp_size).value_or(1);
    mesh.pp = first_of(a.pp_size, c.pp_size).value_or(1);
    o.parallelism = mesh;
  }
  o.backward_prefetch = c.backward_prefetch;
  o.log_with = c.log_with;
  o.cpu = a.cpu || c.use_cpu.value_or(false) || c.distributed_type == std::string("MULTI_CPU");
  o.grace_period = a.grace_period;
  o.max_restarts = first_of(a.max_restarts, c.max_restarts).value_or(0);
  o.monitor_interval = a.monitor_interval;
  o.rank_prefix = a.rank_prefix;
  o.tee_dir = a.tee;
  return o;
}

}  // namespace launcher
}  // namespace accel
