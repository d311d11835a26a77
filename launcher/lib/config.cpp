#include "config.h"

#include "accel_common/contract.h"
#include "fsdp_settings.h"

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
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

/// What reading a file fills.
struct Reading {
  std::string path;
  Config config;
  FsdpStrategyKeys strategy;
};

/// Reads one key's value into the Reading; `name` (with its section's prefix) is for messages.
using KeyReader = std::function<void(Reading&, const std::string& name, const YAML::Node&)>;

KeyReader integer_into(std::optional<int> Config::*field, int min, int max) {
  return [=](Reading& r, const std::string& name, const YAML::Node& value) {
    r.config.*field = read_int(r.path, name, value, min, max);
  };
}
KeyReader boolean_into(std::optional<bool> Config::*field) {
  return [=](Reading& r, const std::string& name, const YAML::Node& value) {
    r.config.*field = read_bool(r.path, name, value);
  };
}
KeyReader choice_into(std::optional<std::string> Config::*field, std::vector<std::string> allowed) {
  return [=](Reading& r, const std::string& name, const YAML::Node& value) {
    r.config.*field = read_choice(r.path, name, value, allowed);
  };
}
KeyReader text_into(std::optional<std::string> Config::*field) {
  return [=](Reading& r, const std::string& name, const YAML::Node& value) {
    r.config.*field = scalar(r.path, name, value);
  };
}
/// Names (trackers, module classes): one name, comma-separated names, or a YAML list of them.
KeyReader names_into(std::optional<std::string> Config::*field) {
  return [=](Reading& r, const std::string& name, const YAML::Node& value) {
    std::string names;
    if (value.IsSequence()) {
      for (const auto& item : value)
        names += (names.empty() ? "" : ",") + scalar(r.path, name, item);
    } else {
      names = scalar(r.path, name, value);
    }
    if (!names.empty()) r.config.*field = names;
  };
}

/// A part of the file: its top level or one of its sections, each key with its reader. A key
/// that is null is left unset, as Accelerate reads it; a section's key not in its table is
/// warned about (with `ignored_note`) and ignored.
struct Section {
  std::string name;  // empty for the top level
  std::vector<std::pair<std::string, KeyReader>> keys;
  std::string ignored_note;
};

Section top_level() {
  // Accelerate's FSDP and DEEPSPEED types are multi-GPU data parallel to accel; the sharding
  // itself comes from fsdp_config or deepspeed_config.
  auto distributed_types = contract::distributed_type_choices();
  distributed_types.insert(distributed_types.end(), {"FSDP", "DEEPSPEED"});
  return {"",
          {{"distributed_type", choice_into(&Config::distributed_type, distributed_types)},
           {"num_processes", integer_into(&Config::num_processes, 1, 1 << 20)},
           {"num_machines", integer_into(&Config::num_machines, 1, 1 << 20)},
           {"machine_rank", integer_into(&Config::machine_rank, 0, 1 << 20)},
           {"main_process_ip", text_into(&Config::main_process_ip)},
           {"main_process_port", integer_into(&Config::main_process_port, 1, 65535)},
           {"mixed_precision",
            choice_into(&Config::mixed_precision, contract::mixed_precision_choices())},
           {"gpu_ids", text_into(&Config::gpu_ids)},
           {"use_cpu", boolean_into(&Config::use_cpu)},
           {"gradient_accumulation_steps",
            integer_into(&Config::gradient_accumulation_steps, 1, 1 << 20)},
           {"max_restarts", integer_into(&Config::max_restarts, 0, 1 << 20)},
           {"ddp_find_unused_parameters", boolean_into(&Config::find_unused_parameters)},
           {"ddp_static_graph", boolean_into(&Config::static_graph)},
           {"ddp_comm_hook", choice_into(&Config::comm_hook, contract::ddp_comm_hook_choices())},
           // The built-in trackers; the runtime checks the names (a program may be built
           // against a libaccel with other trackers).
           {"log_with", names_into(&Config::log_with)}},
          ""};
}

Section fsdp_section() {
  return {
      "fsdp_config",
      {{"fsdp_sharding_strategy",
        [](Reading& r, const std::string& name, const YAML::Node& value) {
          r.strategy.sharding_strategy =
              read_choice(r.path, name, value, contract::sharding_strategy_choices());
        }},
       {"fsdp_reshard_after_forward",
        [](Reading& r, const std::string& name, const YAML::Node& value) {
          r.strategy.reshard_after_forward = scalar(r.path, name, value);
        }},
       {"fsdp_version", integer_into(&Config::fsdp_version, 1, 2)},
       {"fsdp_activation_checkpointing", boolean_into(&Config::activation_checkpointing)},
       {"fsdp_cpu_ram_efficient_loading", boolean_into(&Config::cpu_ram_efficient_loading)},
       {"fsdp_sync_module_states", boolean_into(&Config::sync_module_states)},
       {"fsdp_forward_prefetch", boolean_into(&Config::forward_prefetch)},
       {"fsdp_use_orig_params", boolean_into(&Config::use_orig_params)},
       {"fsdp_backward_prefetch",
        choice_into(&Config::backward_prefetch, {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"})},
       // Accelerate writes one comma-separated string; a YAML list is taken too.
       {"fsdp_transformer_layer_cls_to_wrap", names_into(&Config::classes_to_wrap)},
       {"fsdp_auto_wrap_policy",
        choice_into(&Config::auto_wrap_policy,
                    {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"})},
       {"fsdp_min_num_params",
        integer_into(&Config::min_num_params, 1, std::numeric_limits<int>::max())},
       {"fsdp_state_dict_type",
        choice_into(&Config::state_dict_type, contract::state_dict_type_choices())},
       {"fsdp_offload_params", boolean_into(&Config::offload_params)}},
      ""};
}

/// The five sizes; Accelerate's context-parallel backend is checked, its sequence-parallel
/// (DeepSpeed Ulysses) keys are warned about, not dropped silently.
Section parallelism_section() {
  return {"parallelism_config",
          {{"parallelism_config_dp_replicate_size",
            integer_into(&Config::dp_replicate_size, 1, 1 << 20)},
           {"parallelism_config_dp_shard_size", integer_into(&Config::dp_shard_size, 1, 1 << 20)},
           {"parallelism_config_tp_size", integer_into(&Config::tp_size, 1, 1 << 20)},
           {"parallelism_config_cp_size", integer_into(&Config::cp_size, 1, 1 << 20)},
           {"parallelism_config_pp_size", integer_into(&Config::pp_size, 1, 1 << 20)},
           {"parallelism_config_cp_backend",
            [](Reading& r, const std::string& name, const YAML::Node& value) {
              read_choice(r.path, name, value, {"torch"});
            }}},
          ""};
}

/// Its backend (Accelerate writes TE, MSAMP or AO; the runtime refuses the first two by name).
/// The TE and MS-AMP recipes' keys are warned about, not dropped silently.
Section fp8_section() {
  return {"fp8_config",
          {{"backend", choice_into(&Config::fp8_backend, {"TE", "MSAMP", "AO"})}},
          " (accel's FP8 options are accel::Fp8Options in code)"};
}

/// ZeRO's stage and offload.
Section deepspeed_section() {
  auto offload = [](Reading& r, const std::string& name, const YAML::Node& value) {
    // ZeRO-Offload: accel offloads the shards, their gradients and the optimizer state together,
    // so either key set to cpu turns it on. NVMe is not offered.
    const bool to_cpu = read_choice(r.path, name, value, {"none", "cpu"}) == "cpu";
    r.config.offload_params = r.config.offload_params.value_or(false) || to_cpu;
  };
  return {"deepspeed_config",
          {{"zero_stage",
            [](Reading& r, const std::string& name, const YAML::Node& value) {
              // ZeRO stage n shards what FSDP's strategies shard (stage 1 has no FSDP name).
              static const char* const kStageStrategies[] = {"NO_SHARD", "SHARD_OPTIMIZER_STATE",
                                                             "SHARD_GRAD_OP", "FULL_SHARD"};
              r.config.sharding_strategy = kStageStrategies[read_int(r.path, name, value, 0, 3)];
            }},
           {"offload_optimizer_device", offload},
           {"offload_param_device", offload}},
          ""};
}

const std::vector<Section>& sections() {
  static const std::vector<Section> all = {fsdp_section(), parallelism_section(), fp8_section(),
                                           deepspeed_section()};
  return all;
}

/// The reader of `key` in `section`, or null.
const KeyReader* reader_of(const Section& section, const std::string& key) {
  for (const auto& [name, reader] : section.keys) {
    if (name == key) return &reader;
  }
  return nullptr;
}

/// A section's mapping, each key through its reader.
void read_section(Reading& r, const Section& section, const YAML::Node& map,
                  std::vector<std::string>* warnings) {
  for (const auto& entry : map) {
    const std::string key = entry.first.as<std::string>();
    const std::string name = section.name + "." + key;
    if (const KeyReader* read = reader_of(section, key)) {
      if (!entry.second.IsNull()) (*read)(r, name, entry.second);
    } else if (warnings != nullptr) {
      warnings->push_back("config file " + r.path + ": key '" + name +
                          "' is not used by accel and is ignored" + section.ignored_note);
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
  Reading r{path, {}, {}};
  if (root.IsNull()) return r.config;
  if (!root.IsMap()) throw ConfigError("config file " + path + ": expected a mapping of keys");
  static const Section kTopLevel = top_level();
  for (const auto& entry : root) {
    const std::string key = entry.first.as<std::string>();
    const YAML::Node& value = entry.second;
    const auto section = std::find_if(sections().begin(), sections().end(),
                                      [&](const Section& s) { return s.name == key; });
    if (const KeyReader* read = reader_of(kTopLevel, key)) {
      if (!value.IsNull()) (*read)(r, key, value);
    } else if (section != sections().end()) {
      if (value.IsNull()) continue;
      if (!value.IsMap()) fail(path, key, "expected a mapping");
      read_section(r, *section, value, warnings);
    } else if (kAccelerateOnlyKeys.count(key) == 0 && warnings != nullptr) {
      warnings->push_back("config file " + path + ": unknown key '" + key + "' is ignored");
    }
  }
  Config& c = r.config;
  resolve_fsdp_strategy(path, r.strategy.sharding_strategy, r.strategy.reshard_after_forward, c);
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
