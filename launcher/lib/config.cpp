#include "config.h"

#include "accel_common/contract.h"
#include "fsdp_settings.h"

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace accel {
namespace launcher {
namespace {

// Accelerate keys with no meaning for accel (yet): accepted without a warning.
const std::set<std::string> kAccelerateOnlyKeys = {
    "compute_environment",    "debug",        "downcast_bf16", "enable_cpu_affinity",
    "main_training_function", "rdzv_backend", "same_network",  "tpu_env",
    "tpu_use_cluster",        "tpu_use_sudo", "dynamo_config", "megatron_lm_config",
    "machine_type",           "ipex_config",  "mpirun_config", "use_mps_device"};

[[noreturn]] void fail(const std::string& path, const std::string& key, const std::string& what) {
  throw ConfigError("config file " + path + ": key '" + key + "': " + what);
}

std::string scalar(const std::string& path, const std::string& key, const YAML::Node& node) {
  if (!node.IsScalar()) fail(path, key, "expected a single value");
  return node.Scalar();
}

int read_int(const std::string& path, const std::string& key, const YAML::Node& node, int min,
             int max) {
  const std::string text = scalar(path, key, node);
  const auto parsed = contract::parse_integer(text);
  if (!parsed) fail(path, key, "'" + text + "' is not an integer");
  const int64_t value = *parsed;
  if (value < min || value > max) {
    fail(path, key,
         text + " is out of range (expected " + std::to_string(min) + ".." + std::to_string(max) +
             ")");
  }
  return static_cast<int>(value);
}

bool read_bool(const std::string& path, const std::string& key, const YAML::Node& node) {
  const std::string text = scalar(path, key, node);
  if (text == "true" || text == "True" || text == "yes") return true;
  if (text == "false" || text == "False" || text == "no") return false;
  fail(path, key, "'" + text + "' is not a boolean (expected true or false)");
}

std::string read_choice(const std::string& path, const std::string& key, const YAML::Node& node,
                        const std::vector<std::string>& allowed) {
  const std::string text = scalar(path, key, node);
  for (const auto& a : allowed) {
    if (text == a) return text;
  }
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  fail(path, key, "'" + text + "' is not allowed (allowed: " + list + ")");
}

/// Sets c.sharding_strategy from fsdp_config's strategy keys (deepspeed_config's zero_stage may
/// have set it already; fsdp_config's keys win, as a file has only one of the two in use).
void resolve_fsdp_strategy(const std::string& path, const std::optional<std::string>& strategy,
                           const std::optional<std::string>& reshard_after_forward, Config& c) {
  if (strategy) c.sharding_strategy = strategy;
  if (!reshard_after_forward) return;
  const int version = c.fsdp_version.value_or(1);
  std::string expected;
  const auto resharded =
      strategy_of_reshard_after_forward(*reshard_after_forward, version, &expected);
  if (!resharded) {
    fail(path, "fsdp_config.fsdp_reshard_after_forward",
         "'" + *reshard_after_forward + "' is not allowed with fsdp_version " +
             std::to_string(version) + " (" + expected + ")");
  }
  if (strategy && *strategy != *resharded) {
    fail(path, "fsdp_config.fsdp_reshard_after_forward",
         "'" + *reshard_after_forward + "' (" + *resharded +
             ") contradicts fsdp_config.fsdp_sharding_strategy " + *strategy +
             " (keep one of the two: fsdp_sharding_strategy is the older name)");
  }
  c.sharding_strategy = resharded;
}

/// fsdp_config's strategy keys, read once the whole file is: fsdp_reshard_after_forward depends
/// on fsdp_version, which Accelerate writes after it.
struct FsdpStrategyKeys {
  std::optional<std::string> sharding_strategy, reshard_after_forward;
};

/// The file's top-level keys that hold one value; false for another key.
bool read_top_level_key(const std::string& path, const std::string& key, const YAML::Node& value,
                        Config& c) {
  if (key == "distributed_type") {
    // Accelerate's FSDP and DEEPSPEED types are multi-GPU data parallel to accel; the sharding
    // itself comes from fsdp_config or deepspeed_config.
    auto readable = contract::distributed_type_choices();
    readable.insert(readable.end(), {"FSDP", "DEEPSPEED"});
    c.distributed_type = read_choice(path, key, value, readable);
  } else if (key == "num_processes") {
    c.num_processes = read_int(path, key, value, 1, 1 << 20);
  } else if (key == "num_machines") {
    c.num_machines = read_int(path, key, value, 1, 1 << 20);
  } else if (key == "machine_rank") {
    c.machine_rank = read_int(path, key, value, 0, 1 << 20);
  } else if (key == "main_process_ip") {
    if (!value.IsNull()) c.main_process_ip = scalar(path, key, value);
  } else if (key == "main_process_port") {
    if (!value.IsNull()) c.main_process_port = read_int(path, key, value, 1, 65535);
  } else if (key == "mixed_precision") {
    c.mixed_precision = read_choice(path, key, value, contract::mixed_precision_choices());
  } else if (key == "gpu_ids") {
    c.gpu_ids = scalar(path, key, value);
  } else if (key == "use_cpu") {
    c.use_cpu = read_bool(path, key, value);
  } else if (key == "gradient_accumulation_steps") {
    c.gradient_accumulation_steps = read_int(path, key, value, 1, 1 << 20);
  } else if (key == "max_restarts") {
    c.max_restarts = read_int(path, key, value, 0, 1 << 20);
  } else if (key == "ddp_find_unused_parameters") {
    c.find_unused_parameters = read_bool(path, key, value);
  } else if (key == "ddp_static_graph") {
    c.static_graph = read_bool(path, key, value);
  } else if (key == "ddp_comm_hook") {
    c.comm_hook = read_choice(path, key, value, {"no", "fp16", "bf16"});
  } else if (key == "log_with") {
    // The built-in trackers: one name, comma-separated names, or a YAML list. The runtime checks
    // the names (a program may be built against a libaccel with other trackers).
    std::string names;
    if (value.IsSequence()) {
      for (const auto& name : value) names += (names.empty() ? "" : ",") + scalar(path, key, name);
    } else if (!value.IsNull()) {
      names = scalar(path, key, value);
    }
    if (!names.empty()) c.log_with = names;
  } else {
    return false;
  }
  return true;
}

/// fsdp_config's keys; one accel does not use is a warning.
void read_fsdp_config(const std::string& path, const YAML::Node& value, Config& c,
                      FsdpStrategyKeys& strategy, std::vector<std::string>* warnings) {
  for (const auto& fsdp : value) {
    const std::string sub = fsdp.first.as<std::string>();
    const std::string name = "fsdp_config." + sub;
    if (sub == "fsdp_sharding_strategy") {
      strategy.sharding_strategy =
          read_choice(path, name, fsdp.second, contract::sharding_strategy_choices());
    } else if (sub == "fsdp_reshard_after_forward") {
      strategy.reshard_after_forward = scalar(path, name, fsdp.second);
    } else if (sub == "fsdp_version") {
      c.fsdp_version = read_int(path, name, fsdp.second, 1, 2);
    } else if (sub == "fsdp_activation_checkpointing") {
      c.activation_checkpointing = read_bool(path, name, fsdp.second);
    } else if (sub == "fsdp_cpu_ram_efficient_loading") {
      c.cpu_ram_efficient_loading = read_bool(path, name, fsdp.second);
    } else if (sub == "fsdp_sync_module_states") {
      c.sync_module_states = read_bool(path, name, fsdp.second);
    } else if (sub == "fsdp_forward_prefetch") {
      c.forward_prefetch = read_bool(path, name, fsdp.second);
    } else if (sub == "fsdp_use_orig_params") {
      c.use_orig_params = read_bool(path, name, fsdp.second);
    } else if (sub == "fsdp_backward_prefetch") {
      c.backward_prefetch =
          read_choice(path, name, fsdp.second, {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"});
    } else if (sub == "fsdp_transformer_layer_cls_to_wrap") {
      // Accelerate writes one comma-separated string; a YAML list is taken too.
      std::string names;
      if (fsdp.second.IsSequence()) {
        for (const auto& name : fsdp.second) {
          names += (names.empty() ? "" : ",") +
                   scalar(path, "fsdp_config.fsdp_transformer_layer_cls_to_wrap", name);
        }
      } else {
        names = scalar(path, "fsdp_config.fsdp_transformer_layer_cls_to_wrap", fsdp.second);
      }
      c.classes_to_wrap = names;
    } else if (sub == "fsdp_auto_wrap_policy") {
      c.auto_wrap_policy = read_choice(path, "fsdp_config.fsdp_auto_wrap_policy", fsdp.second,
                                       {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"});
    } else if (sub == "fsdp_min_num_params") {
      c.min_num_params = read_int(path, "fsdp_config.fsdp_min_num_params", fsdp.second, 1,
                                  std::numeric_limits<int>::max());
    } else if (sub == "fsdp_state_dict_type") {
      c.state_dict_type = read_choice(path, "fsdp_config.fsdp_state_dict_type", fsdp.second,
                                      contract::state_dict_type_choices());
    } else if (sub == "fsdp_offload_params") {
      c.offload_params = read_bool(path, "fsdp_config.fsdp_offload_params", fsdp.second);
    } else if (warnings != nullptr) {
      warnings->push_back("config file " + path + ": key 'fsdp_config." + sub +
                          "' is not used by accel and is ignored");
    }
  }
}

/// parallelism_config's keys: the five sizes; Accelerate's context-parallel backend and its
/// sequence-parallel (DeepSpeed Ulysses) keys are warned about, not dropped silently.
void read_parallelism_config(const std::string& path, const YAML::Node& value, Config& c,
                             std::vector<std::string>* warnings) {
  const std::pair<const char*, std::optional<int> Config::*> sizes[] = {
      {"parallelism_config_dp_replicate_size", &Config::dp_replicate_size},
      {"parallelism_config_dp_shard_size", &Config::dp_shard_size},
      {"parallelism_config_tp_size", &Config::tp_size},
      {"parallelism_config_cp_size", &Config::cp_size},
      {"parallelism_config_pp_size", &Config::pp_size}};
  for (const auto& entry : value) {
    const std::string sub = entry.first.as<std::string>();
    const std::string name = "parallelism_config." + sub;
    bool known = false;
    for (const auto& [key, field] : sizes) {
      if (sub != key) continue;
      c.*field = read_int(path, name, entry.second, 1, 1 << 20);
      known = true;
    }
    if (known) continue;
    if (sub == "parallelism_config_cp_backend") {
      read_choice(path, name, entry.second, {"torch"});
    } else if (warnings != nullptr) {
      warnings->push_back("config file " + path + ": key '" + name +
                          "' is not used by accel and is ignored");
    }
  }
}

/// fp8_config's keys: its backend (Accelerate writes TE, MSAMP or AO; the runtime refuses the
/// first two by name). The TE and MS-AMP recipes' keys are warned about, not dropped silently.
void read_fp8_config(const std::string& path, const YAML::Node& value, Config& c,
                     std::vector<std::string>* warnings) {
  for (const auto& entry : value) {
    const std::string sub = entry.first.as<std::string>();
    if (sub == "backend") {
      c.fp8_backend = read_choice(path, "fp8_config.backend", entry.second, {"TE", "MSAMP", "AO"});
    } else if (warnings != nullptr) {
      warnings->push_back("config file " + path + ": key 'fp8_config." + sub +
                          "' is not used by accel and is ignored (accel's FP8 options are "
                          "accel::Fp8Options in code)");
    }
  }
}

/// deepspeed_config's keys (ZeRO stage and offload); one accel does not use is a warning.
void read_deepspeed_config(const std::string& path, const YAML::Node& value, Config& c,
                           std::vector<std::string>* warnings) {
  for (const auto& deepspeed : value) {
    const std::string sub = deepspeed.first.as<std::string>();
    if (sub == "zero_stage") {
      // ZeRO stage n shards what FSDP's strategies shard (stage 1 has no FSDP name).
      static const char* const kStageStrategies[] = {"NO_SHARD", "SHARD_OPTIMIZER_STATE",
                                                     "SHARD_GRAD_OP", "FULL_SHARD"};
      c.sharding_strategy =
          kStageStrategies[read_int(path, "deepspeed_config.zero_stage", deepspeed.second, 0, 3)];
    } else if (sub == "offload_optimizer_device" || sub == "offload_param_device") {
      // ZeRO-Offload: accel offloads the shards, their gradients and the optimizer state
      // together, so either key set to cpu turns it on. NVMe is not offered.
      const bool to_cpu =
          read_choice(path, "deepspeed_config." + sub, deepspeed.second, {"none", "cpu"}) == "cpu";
      c.offload_params = c.offload_params.value_or(false) || to_cpu;
    } else if (warnings != nullptr) {
      warnings->push_back("config file " + path + ": key 'deepspeed_config." + sub +
                          "' is not used by accel and is ignored");
    }
  }
}

/// The file's keys that contradict each other.
void check_consistency(const std::string& path, const Config& c) {
  const int machines = c.num_machines.value_or(1);
  if (c.machine_rank && *c.machine_rank >= machines) {
    fail(path, "machine_rank",
         std::to_string(*c.machine_rank) + " is out of range (expected 0.." +
             std::to_string(machines - 1) + " for num_machines " + std::to_string(machines) + ")");
  }
  if (c.distributed_type && *c.distributed_type == "NO" && c.num_processes.value_or(1) > 1) {
    fail(path, "num_processes",
         std::to_string(*c.num_processes) +
             " contradicts distributed_type NO (expected 1, or distributed_type MULTI_CPU or "
             "MULTI_GPU)");
  }
}

/// The file's YAML; a ConfigError naming the file when it cannot be read or parsed.
YAML::Node read_yaml(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("config file " + path + ": cannot be read");
  try {
    return YAML::Load(in);
  } catch (const YAML::Exception& e) {
    throw ConfigError("config file " + path + " is not valid YAML: " + e.msg + " (line " +
                      std::to_string(e.mark.line + 1) + ", column " +
                      std::to_string(e.mark.column + 1) + ")");
  }
}

}  // namespace

Config load_config(const std::string& path, std::vector<std::string>* warnings) {
  const YAML::Node root = read_yaml(path);
  Config c;
  if (root.IsNull()) return c;
  if (!root.IsMap()) throw ConfigError("config file " + path + ": expected a mapping of keys");
  FsdpStrategyKeys strategy;
  for (const auto& entry : root) {
    const std::string key = entry.first.as<std::string>();
    const YAML::Node& value = entry.second;
    if (read_top_level_key(path, key, value, c)) continue;
    if (key == "fsdp_config" || key == "deepspeed_config" || key == "parallelism_config" ||
        key == "fp8_config") {
      if (value.IsNull()) continue;
      if (!value.IsMap()) fail(path, key, "expected a mapping");
      if (key == "fp8_config") {
        read_fp8_config(path, value, c, warnings);
      } else if (key == "fsdp_config") {
        read_fsdp_config(path, value, c, strategy, warnings);
      } else if (key == "parallelism_config") {
        read_parallelism_config(path, value, c, warnings);
      } else {
        read_deepspeed_config(path, value, c, warnings);
      }
    } else if (kAccelerateOnlyKeys.count(key) == 0 && warnings != nullptr) {
      warnings->push_back("config file " + path + ": unknown key '" + key + "' is ignored");
    }
  }
  resolve_fsdp_strategy(path, strategy.sharding_strategy, strategy.reshard_after_forward, c);
  if (c.distributed_type == std::string("FSDP")) c.default_strategy = "FULL_SHARD";
  if (c.distributed_type == std::string("DEEPSPEED")) c.default_strategy = "SHARD_GRAD_OP";
  check_consistency(path, c);
  return c;
}

std::string to_yaml(const Config& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  auto put = [&](const char* key, const auto& value) {
    if (value) out << YAML::Key << key << YAML::Value << *value;
  };
  put("distributed_type", c.distributed_type);
  put("num_processes", c.num_processes);
  put("num_machines", c.num_machines);
  put("machine_rank", c.machine_rank);
  put("main_process_ip", c.main_process_ip);
  put("main_process_port", c.main_process_port);
  if (c.mixed_precision) {
    // Quoted as Accelerate writes it: a bare no would read back as a boolean elsewhere.
    out << YAML::Key << "mixed_precision" << YAML::Value << YAML::SingleQuoted
        << *c.mixed_precision;
  }
  if (c.fp8_backend) {
    out << YAML::Key << "fp8_config" << YAML::Value << YAML::BeginMap << YAML::Key << "backend"
        << YAML::Value << *c.fp8_backend << YAML::EndMap;
  }
  put("gpu_ids", c.gpu_ids);
  put("use_cpu", c.use_cpu);
  put("gradient_accumulation_steps", c.gradient_accumulation_steps);
  put("max_restarts", c.max_restarts);
  put("ddp_find_unused_parameters", c.find_unused_parameters);
  put("ddp_static_graph", c.static_graph);
  put("ddp_comm_hook", c.comm_hook);
  put("log_with", c.log_with);
  if (c.sharding_strategy || c.classes_to_wrap || c.state_dict_type || c.auto_wrap_policy ||
      c.min_num_params || c.offload_params) {
    out << YAML::Key << "fsdp_config" << YAML::Value << YAML::BeginMap;
    // Accelerate 1.15's keys: the strategy as FSDP version 1's fsdp_reshard_after_forward.
    // SHARD_OPTIMIZER_STATE (ZeRO-1) has no FSDP name and keeps the older key.
    std::string expected;
    if (c.sharding_strategy &&
        strategy_of_reshard_after_forward(*c.sharding_strategy, 1, &expected)) {
      out << YAML::Key << "fsdp_version" << YAML::Value << 1;
      put("fsdp_reshard_after_forward", c.sharding_strategy);
    } else {
      put("fsdp_sharding_strategy", c.sharding_strategy);
    }
    put("fsdp_auto_wrap_policy", c.auto_wrap_policy);
    put("fsdp_transformer_layer_cls_to_wrap", c.classes_to_wrap);
    put("fsdp_min_num_params", c.min_num_params);
    put("fsdp_state_dict_type", c.state_dict_type);
    put("fsdp_offload_params", c.offload_params);
    out << YAML::EndMap;
  }
  if (c.dp_replicate_size || c.dp_shard_size || c.tp_size || c.cp_size || c.pp_size) {
    out << YAML::Key << "parallelism_config" << YAML::Value << YAML::BeginMap;
    put("parallelism_config_dp_replicate_size", c.dp_replicate_size);
    put("parallelism_config_dp_shard_size", c.dp_shard_size);
    put("parallelism_config_tp_size", c.tp_size);
    put("parallelism_config_cp_size", c.cp_size);
    put("parallelism_config_pp_size", c.pp_size);
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void save_config(const Config& config, const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    std::string partial;
    std::stringstream parts(dir);
    std::string part;
    if (dir[0] == '/') partial = "/";
    while (std::getline(parts, part, '/')) {
      if (part.empty()) continue;
      partial += part + "/";
      ::mkdir(partial.c_str(), 0755);
    }
  }
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp);
    out << to_yaml(config);
    if (!out.flush()) {
      std::remove(temp.c_str());
      throw ConfigError("config file " + path + ": cannot be written");
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    throw ConfigError("config file " + path + ": cannot be written");
  }
}

std::string default_config_path() {
  if (const char* home = std::getenv(contract::kHome); home && *home) {
    return std::string(home) + "/default_config.yaml";
  }
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache) {
    return std::string(cache) + "/accel/default_config.yaml";
  }
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/accel/default_config.yaml";
}

}  // namespace launcher
}  // namespace accel
