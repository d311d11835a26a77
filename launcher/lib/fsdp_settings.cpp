// Accelerate's FSDP and DeepSpeed settings from a config file and from flags: see
// fsdp_settings.h.

#include "fsdp_settings.h"

#include "accel_common/contract.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace accel {
namespace launcher {
namespace {

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

/// "true"/"false" in the spellings Accelerate's str_to_bool takes; nullopt otherwise.
std::optional<bool> parse_bool(const std::string& text) {
  const std::string word = upper(text);
  if (word == "TRUE" || word == "YES" || word == "Y" || word == "ON" || word == "1") return true;
  if (word == "FALSE" || word == "NO" || word == "N" || word == "OFF" || word == "0") return false;
  return std::nullopt;
}

bool flag_bool(const std::optional<std::string>& value, const std::string& flag,
               std::optional<bool>& out) {
  if (!value) return false;
  const auto parsed = parse_bool(*value);
  if (!parsed) {
    throw std::invalid_argument(flag + " '" + *value +
                                "' is not a boolean (expected true or false)");
  }
  out = parsed;
  return true;
}

std::string flag_choice(const std::string& value, const std::string& flag,
                        const std::vector<std::string>& allowed) {
  const std::string word = upper(value);
  if (contract::is_one_of(word, allowed)) return word;
  throw std::invalid_argument(flag + " '" + value +
                              "' is not allowed (allowed: " + contract::join(allowed) + ")");
}

// ZeRO stage n shards what these strategies shard (stage 1 has no FSDP name).
const char* const kStageStrategies[] = {"NO_SHARD", "SHARD_OPTIMIZER_STATE", "SHARD_GRAD_OP",
                                        "FULL_SHARD"};

}  // namespace

std::optional<std::string> strategy_of_reshard_after_forward(const std::string& value,
                                                             int fsdp_version,
                                                             std::string* expected) {
  if (fsdp_version == 2) {
    // FSDP2 has no strategies: resharding after forward is ZeRO-3, keeping the parameters
    // gathered until backward is ZeRO-2.
    if (expected != nullptr) *expected = "expected true or false";
    const auto reshard = parse_bool(value);
    if (!reshard) return std::nullopt;
    return std::string(*reshard ? "FULL_SHARD" : "SHARD_GRAD_OP");
  }
  // FSDP1's ShardingStrategy, by name or by its number as Accelerate takes it.
  static const std::vector<std::string> kFsdpNames{"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD",
                                                   "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
  if (expected != nullptr) {
    *expected =
        "expected one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
        "SHARD_OPTIMIZER_STATE; true and false are fsdp_version 2's";
  }
  std::string name = upper(value);
  if (name.size() == 1 && name[0] >= '1' && name[0] <= '5') name = kFsdpNames[name[0] - '1'];
  if (name == "HYBRID_SHARD_ZERO2") {
    if (expected != nullptr) {
      *expected = "HYBRID_SHARD_ZERO2 is not offered by accel: use HYBRID_SHARD, or SHARD_GRAD_OP";
    }
    return std::nullopt;
  }
  if (contract::is_one_of(name, contract::sharding_strategy_choices())) return name;
  return std::nullopt;
}

namespace {

/// The sharding strategy the flags name: --fsdp_sharding_strategy, --fsdp_reshard_after_forward
/// (read by the FSDP version in effect) and --zero_stage, which must agree.
void strategy_of_flags(const ShardingFlags& f, std::optional<int> file_version, Config& c) {
  if (f.sharding_strategy) {
    c.sharding_strategy = flag_choice(*f.sharding_strategy, "--fsdp_sharding_strategy",
                                      contract::sharding_strategy_choices());
  }
  if (f.reshard_after_forward) {
    const int version = c.fsdp_version.value_or(file_version.value_or(1));
    std::string expected;
    const auto strategy =
        strategy_of_reshard_after_forward(*f.reshard_after_forward, version, &expected);
    if (!strategy) {
      throw std::invalid_argument("--fsdp_reshard_after_forward '" + *f.reshard_after_forward +
                                  "' is not allowed with fsdp_version " + std::to_string(version) +
                                  " (" + expected + ")");
    }
    if (c.sharding_strategy && *c.sharding_strategy != *strategy) {
      throw std::invalid_argument("--fsdp_reshard_after_forward " + *f.reshard_after_forward +
                                  " (" + *strategy + ") contradicts --fsdp_sharding_strategy " +
                                  *c.sharding_strategy + " (give one of the two)");
    }
    c.sharding_strategy = strategy;
  }
  if (f.zero_stage) {
    if (*f.zero_stage < 0 || *f.zero_stage > 3) {
      throw std::invalid_argument("--zero_stage " + std::to_string(*f.zero_stage) +
                                  " is out of range (expected 0..3)");
    }
    const std::string strategy = kStageStrategies[*f.zero_stage];
    if (c.sharding_strategy && *c.sharding_strategy != strategy) {
      throw std::invalid_argument("--zero_stage " + std::to_string(*f.zero_stage) + " (" +
                                  strategy + ") contradicts the FSDP flags' " +
                                  *c.sharding_strategy);
    }
    c.sharding_strategy = strategy;
  }
}

}  // namespace

Config config_of_flags(const ShardingFlags& f, std::optional<int> file_version) {
  Config c;
  if (f.use_fsdp && f.use_deepspeed) {
    throw std::invalid_argument("--use_fsdp contradicts --use_deepspeed (choose one)");
  }
  if (f.fsdp_version) {
    c.fsdp_version = std::stoi(flag_choice(*f.fsdp_version, "--fsdp_version", {"1", "2"}));
  }
  strategy_of_flags(f, file_version, c);
  flag_bool(f.offload_params, "--fsdp_offload_params", c.offload_params);
  for (const auto* device : {&f.offload_optimizer_device, &f.offload_param_device}) {
    if (!*device) continue;
    const std::string flag =
        device == &f.offload_param_device ? "--offload_param_device" : "--offload_optimizer_device";
    // ZeRO-Offload: accel offloads shards, gradients and optimizer state together.
    if (flag_choice(**device, flag, {"NONE", "CPU"}) == "CPU") c.offload_params = true;
  }
  if (f.auto_wrap_policy) {
    c.auto_wrap_policy = flag_choice(*f.auto_wrap_policy, "--fsdp_auto_wrap_policy",
                                     {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"});
  }
  c.classes_to_wrap = f.classes_to_wrap;
  if (f.min_num_params) {
    if (*f.min_num_params < 1) {
      throw std::invalid_argument("--fsdp_min_num_params " + std::to_string(*f.min_num_params) +
                                  " is out of range (expected 1 or more)");
    }
    c.min_num_params = f.min_num_params;
  }
  if (f.state_dict_type) {
    c.state_dict_type = flag_choice(*f.state_dict_type, "--fsdp_state_dict_type",
                                    contract::state_dict_type_choices());
  }
  flag_bool(f.activation_checkpointing, "--fsdp_activation_checkpointing",
            c.activation_checkpointing);
  flag_bool(f.cpu_ram_efficient_loading, "--fsdp_cpu_ram_efficient_loading",
            c.cpu_ram_efficient_loading);
  flag_bool(f.sync_module_states, "--fsdp_sync_module_states", c.sync_module_states);
  flag_bool(f.forward_prefetch, "--fsdp_forward_prefetch", c.forward_prefetch);
  flag_bool(f.use_orig_params, "--fsdp_use_orig_params", c.use_orig_params);
  if (f.backward_prefetch) {
    c.backward_prefetch = flag_choice(*f.backward_prefetch, "--fsdp_backward_prefetch",
                                      {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"});
  }
  if (f.use_fsdp) c.default_strategy = "FULL_SHARD";
  // Accelerate's --zero_stage defaults to 2.
  if (f.use_deepspeed) c.default_strategy = "SHARD_GRAD_OP";
  return c;
}

Config merge_sharding(const Config& flags, const Config& file) {
  Config c = file;
  auto over = [](auto& into, const auto& from) {
    if (from) into = from;
  };
  over(c.sharding_strategy, flags.sharding_strategy);
  over(c.offload_params, flags.offload_params);
  over(c.auto_wrap_policy, flags.auto_wrap_policy);
  over(c.classes_to_wrap, flags.classes_to_wrap);
  over(c.min_num_params, flags.min_num_params);
  over(c.state_dict_type, flags.state_dict_type);
  over(c.fsdp_version, flags.fsdp_version);
  over(c.activation_checkpointing, flags.activation_checkpointing);
  over(c.cpu_ram_efficient_loading, flags.cpu_ram_efficient_loading);
  over(c.sync_module_states, flags.sync_module_states);
  over(c.backward_prefetch, flags.backward_prefetch);
  over(c.forward_prefetch, flags.forward_prefetch);
  over(c.use_orig_params, flags.use_orig_params);
  over(c.default_strategy, flags.default_strategy);
  if (!c.sharding_strategy) c.sharding_strategy = c.default_strategy;
  return c;
}

std::vector<std::string> unapplied_fsdp_settings(const Config& c) {
  std::vector<std::string> warnings;
  const bool sharded = c.sharding_strategy && *c.sharding_strategy != "NO_SHARD";
  if (sharded && c.cpu_ram_efficient_loading.value_or(false)) {
    // Accelerate's setting acts inside Transformers' from_pretrained; a C++ program says it in
    // code, and the setting alone cannot.
    warnings.push_back(
        "fsdp_cpu_ram_efficient_loading is done by the program, not by this setting: build the "
        "model with accel::init_empty_weights and fill it with accel::load_checkpoint_in_model "
        "after prepare(optimizer) (FULL_SHARD); each process then reads only its own part");
  }
  // fsdp_sync_module_states true is what prepare(model) always does (every process starts from
  // rank 0's weights); fsdp_use_orig_params true is what accel's sharded parameters always are.
  return warnings;
}

}  // namespace launcher
}  // namespace accel
