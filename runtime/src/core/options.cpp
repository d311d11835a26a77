#include <accel/options.h>

#include "accel_common/contract.h"
#include "checkpoint_graph.h"
#include "distributed/environment.h"
#include "precision/fp8_linear.h"
#include "tracking/builtin_trackers.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <sstream>
#include <utility>

namespace accel {
namespace {

template <typename T>
T pick(const std::optional<T>& in_code, const std::optional<T>& from_env, T fallback) {
  if (in_code) return *in_code;
  if (from_env) return *from_env;
  return fallback;
}

/// The names of a comma-separated variable's value, trimmed, empty ones dropped.
std::vector<std::string> names_in(const std::optional<std::string>& value) {
  std::vector<std::string> names;
  std::stringstream text(value.value_or(""));
  for (std::string name; std::getline(text, name, ',');) {
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

/// The choice `text` names, parsed by `parse`; an error naming the option and the choices when
/// it names none.
template <typename Parse>
auto parsed(Parse parse, const char* option, const std::string& text,
            const std::vector<std::string>& choices) {
  const auto value = parse(text);
  TORCH_CHECK(value.has_value(), "accel: invalid ", option, ": '", text, "' (expected one of ",
              contract::join(choices), ")");
  return *value;
}

/// The training loop's options: placement, batching, accumulation, precision, seed, timeout.
void resolve_training_loop(const AcceleratorOptions& options, const distributed::EnvLookup& env,
                           ResolvedOptions& out) {
  out.device_placement = pick(options.device_placement(),
                              distributed::env_bool(env, contract::kDevicePlacement), true);
  out.split_batches =
      pick(options.split_batches(), distributed::env_bool(env, contract::kSplitBatches), false);
  out.even_batches =
      pick(options.even_batches(), distributed::env_bool(env, contract::kEvenBatches), true);
  out.gradient_accumulation_steps =
      pick(options.gradient_accumulation_steps(),
           distributed::env_int(env, contract::kGradientAccumulationSteps), int64_t{1});
  out.sync_each_batch = options.sync_each_batch();
  out.allow_unprepared_parameters = options.allow_unprepared_parameters();
  out.sync_with_dataloader = options.sync_with_dataloader();
  for (const auto& type : options.rng_types()) {
    TORCH_CHECK(type == "generator" || type == "torch" || type == "cuda",
                "accel: invalid rng_types: '", type, "' (expected generator, torch or cuda)");
    out.synchronize_cpu_generator |= type == "torch";
    out.synchronize_cuda_generator |= type == "cuda";
  }
  out.autocast = options.autocast();
  out.cpu = pick(options.cpu(), distributed::env_bool(env, contract::kUseCpu), false);
  out.mixed_precision =
      parsed(parse_mixed_precision, "mixed_precision",
             pick(options.mixed_precision(),
                  distributed::env_string(env, contract::kMixedPrecision), std::string("no")),
             contract::mixed_precision_choices());
  out.step_scheduler_with_optimizer =
      pick(options.step_scheduler_with_optimizer(),
           distributed::env_bool(env, contract::kStepSchedulerWithOptimizer), true);
  out.fused_optimizer =
      pick(options.fused_optimizer(), distributed::env_bool(env, contract::kFusedOptimizer), true);
  if (options.seed()) {
    out.seed = options.seed();
  } else if (auto seed = distributed::env_int(env, contract::kSeed)) {
    TORCH_CHECK(*seed >= 0, "accel: invalid ACCEL_SEED: ", *seed,
                " (expected a non-negative integer)");
    out.seed = static_cast<uint64_t>(*seed);
  }
  if (options.timeout()) {
    out.timeout = *options.timeout();
  } else if (auto text = distributed::env_string(env, contract::kTimeout)) {
    const auto seconds = contract::parse_seconds(*text);
    TORCH_CHECK(seconds, "accel: invalid ", contract::kTimeout, ": '", *text,
                "' (expected seconds > 0)");
    out.timeout = *seconds;
  }
  out.debug = distributed::env_bool(env, contract::kDebug).value_or(false);
  out.grad_scaler = options.grad_scaler();
  out.ddp = options.ddp();
  out.ddp.find_unused_parameters(
      pick(options.ddp().find_unused_parameters(),
           distributed::env_bool(env, contract::kDdpFindUnusedParameters), false));
  out.ddp.static_graph(pick(options.ddp().static_graph(),
                            distributed::env_bool(env, contract::kDdpStaticGraph), false));
  if (!out.ddp.comm_hook()) {
    out.ddp.comm_hook(parsed(parse_ddp_comm_hook, contract::kDdpCommHook,
                             distributed::env_string(env, contract::kDdpCommHook).value_or("no"),
                             contract::ddp_comm_hook_choices()));
  }
  TORCH_CHECK(!(*out.ddp.find_unused_parameters() && *out.ddp.static_graph()),
              "accel: DistributedDataParallelOptions find_unused_parameters and static_graph are "
              "both set (ACCEL_DDP_FIND_UNUSED_PARAMETERS, ACCEL_DDP_STATIC_GRAPH); set one: "
              "static_graph for a used set that stays the same, find_unused_parameters for one "
              "that changes");
  out.project_config = options.project_config();
}

/// The sharding strategy and FSDP's options: state dict type, offload, wrap policy.
void resolve_sharding(const AcceleratorOptions& options, const distributed::EnvLookup& env,
                      ResolvedOptions& out) {
  out.sharding_strategy = parsed(
      parse_sharding_strategy, "sharding_strategy",
      pick(options.sharding_strategy(), distributed::env_string(env, contract::kShardingStrategy),
           std::string("NO_SHARD")),
      contract::sharding_strategy_choices());
  out.fsdp.state_dict_type = parsed(parse_state_dict_type, "fsdp_state_dict_type",
                                    pick(options.fsdp_state_dict_type(),
                                         distributed::env_string(env, contract::kFsdpStateDictType),
                                         std::string("FULL_STATE_DICT")),
                                    contract::state_dict_type_choices());
  out.fsdp.offload_params = pick(options.fsdp_offload_params(),
                                 distributed::env_bool(env, contract::kFsdpOffloadParams), false);
  TORCH_CHECK(!out.fsdp.offload_params || out.sharding_strategy != ShardingStrategy::NoShard,
              "accel: fsdp_offload_params keeps the shards of a sharded run in host memory, and "
              "sharding_strategy is NO_SHARD; choose SHARD_OPTIMIZER_STATE, SHARD_GRAD_OP, "
              "FULL_SHARD or HYBRID_SHARD with it");
  out.fsdp.transformer_layer_cls_to_wrap = options.fsdp_transformer_layer_cls_to_wrap();
  if (out.fsdp.transformer_layer_cls_to_wrap.empty()) {
    out.fsdp.transformer_layer_cls_to_wrap =
        names_in(distributed::env_string(env, contract::kFsdpClassesToWrap));
  }
  if (options.fsdp_min_num_params()) {
    out.fsdp.min_num_params = *options.fsdp_min_num_params();
    TORCH_CHECK(out.fsdp.min_num_params >= 1,
                "accel: invalid fsdp_min_num_params: ", out.fsdp.min_num_params,
                " (expected an integer >= 1)");
  } else if (auto count = distributed::env_int(env, contract::kFsdpMinNumParams)) {
    TORCH_CHECK(*count >= 1, "accel: invalid ", contract::kFsdpMinNumParams, ": ", *count,
                " (expected an integer >= 1)");
    out.fsdp.min_num_params = *count;
  }
  TORCH_CHECK(out.fsdp.min_num_params == 0 || out.fsdp.transformer_layer_cls_to_wrap.empty(),
              "accel: fsdp_transformer_layer_cls_to_wrap and fsdp_min_num_params are two auto-wrap "
              "policies; set one (FSDP's TRANSFORMER_BASED_WRAP or SIZE_BASED_WRAP)");
}

/// The trackers and resuming. Tracker names are checked here, so a typo fails at construction
/// rather than at init_trackers.
void resolve_tracking_and_resume(const AcceleratorOptions& options,
                                 const distributed::EnvLookup& env, ResolvedOptions& out) {
  std::vector<std::string> log_with = options.log_with();
  if (log_with.empty()) log_with = names_in(distributed::env_string(env, contract::kLogWith));
  for (const auto& name : log_with) {
    const auto& known = tracking::builtin_tracker_names();
    if (name == "all") {
      out.log_with = tracking::all_tracker_names(env);
      break;
    }
    const bool available = std::find(known.begin(), known.end(), name) != known.end();
    TORCH_CHECK(available || name != "tensorboard",
                "accel: log_with names tensorboard, and this libaccel was built without protobuf "
                "(install libprotobuf-dev and protobuf-compiler, and rebuild it)");
    TORCH_CHECK(available || name != "mlflow",
                "accel: log_with names mlflow, and this libaccel was built without libcurl "
                "(install libcurl4-openssl-dev, and rebuild it)");
    TORCH_CHECK(available, "accel: invalid log_with: '", name, "' (expected all, ",
                contract::join(known),
                "; a tracker of your own goes in AcceleratorOptions::trackers)");
    if (std::find(out.log_with.begin(), out.log_with.end(), name) == out.log_with.end()) {
      out.log_with.push_back(name);
    }
  }
  out.trackers = options.trackers();
  if (options.resume()) {
    out.resume = *options.resume();
  } else if (auto resume = distributed::env_string(env, contract::kResume)) {
    TORCH_CHECK(*resume == "auto" || *resume == "no", "accel: invalid ", contract::kResume, ": '",
                *resume, "' (expected auto or no)");
    out.resume = *resume == "auto";
  }
}

/// The checks on values that may come from code or the environment alike.
void check_ranges(const ResolvedOptions& out) {
  TORCH_CHECK(out.gradient_accumulation_steps >= 1,
              "accel: invalid gradient_accumulation_steps: ", out.gradient_accumulation_steps,
              " (expected an integer >= 1)");
  TORCH_CHECK(out.timeout.count() > 0, "accel: invalid timeout: ", out.timeout.count(),
              " ms (expected > 0)");
  TORCH_CHECK(out.ddp.bucket_cap_mb() >= 1,
              "accel: invalid ddp.bucket_cap_mb: ", out.ddp.bucket_cap_mb(),
              " (expected an integer >= 1)");
  const auto& limit = out.project_config.total_limit();
  TORCH_CHECK(!limit || *limit >= 1,
              "accel: invalid project_config.total_limit: ", limit.value_or(0),
              " (expected an integer >= 1)");
}

/// FSDP's features over the sharding: activation checkpointing, the reduce dtype, prefetch
/// (after resolve_training_loop and resolve_sharding, whose results they read).
void resolve_fsdp_features(const AcceleratorOptions& options, const distributed::EnvLookup& env,
                           ResolvedOptions& out) {
  out.fsdp.activation_checkpointing =
      pick(options.fsdp_activation_checkpointing(),
           distributed::env_bool(env, contract::kFsdpActivationCheckpointing), false);
  TORCH_CHECK(!out.fsdp.activation_checkpointing || !out.fsdp.transformer_layer_cls_to_wrap.empty(),
              "accel: fsdp_activation_checkpointing checkpoints the classes "
              "fsdp_transformer_layer_cls_to_wrap names, and it names none; name the blocks to "
              "checkpoint (ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP), or call accel::checkpoint in "
              "your forward");
  out.fsdp.activation_checkpointing_policy = options.activation_checkpointing_policy();
  core::check_checkpoint_policy(out.fsdp.activation_checkpointing_policy);
  // Accelerate's MixedPrecision: gradients are reduced in the mixed precision dtype.
  const auto mp = out.mixed_precision;
  const std::string precision_dtype = mp == MixedPrecision::Fp16 ? "fp16"
                                      : (mp == MixedPrecision::Bf16 || mp == MixedPrecision::Fp8)
                                          ? "bf16"
                                          : "fp32";
  const std::string reduce_dtype =
      pick(options.fsdp_reduce_dtype(), distributed::env_string(env, contract::kFsdpReduceDtype),
           precision_dtype);
  TORCH_CHECK(contract::is_one_of(reduce_dtype, {"fp32", "bf16", "fp16"}),
              "accel: invalid fsdp_reduce_dtype '", reduce_dtype,
              "' (expected one of fp32, bf16, fp16)");
  out.fsdp.reduce_dtype = reduce_dtype == "bf16"   ? ReduceDtype::Bf16
                          : reduce_dtype == "fp16" ? ReduceDtype::Fp16
                                                   : ReduceDtype::Fp32;
  out.fsdp.forward_prefetch =
      pick(options.fsdp_forward_prefetch(),
           distributed::env_bool(env, contract::kFsdpForwardPrefetch), false);
  const std::string backward_prefetch = pick(
      options.fsdp_backward_prefetch(),
      distributed::env_string(env, contract::kFsdpBackwardPrefetch), std::string("NO_PREFETCH"));
  TORCH_CHECK(
      contract::is_one_of(backward_prefetch, {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"}),
      "accel: invalid fsdp_backward_prefetch: '", backward_prefetch,
      "' (expected one of BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH)");
  out.fsdp.backward_prefetch = backward_prefetch != "NO_PREFETCH";
}

/// The device mesh: the program's, else the launcher's variables (read, as by Accelerate, only
/// under ACCELERATE_USE_PARALLELISM_CONFIG=true); and the sharding strategy its data dimensions
/// imply where none was chosen (after resolve_sharding).
void resolve_parallelism(const AcceleratorOptions& options, const distributed::EnvLookup& env,
                         ResolvedOptions& out) {
  out.parallelism_config = options.parallelism_config();
  if (!out.parallelism_config &&
      distributed::env_bool(env, contract::kUseParallelismConfig) == true) {
    auto size = [&](const char* name) {
      const auto value = distributed::env_int(env, name).value_or(1);
      TORCH_CHECK(value >= 1, "accel: invalid ", name, ": ", value, " (expected an integer >= 1)");
      return value;
    };
    out.parallelism_config = ParallelismConfig()
                                 .dp_replicate_size(size(contract::kDpReplicateSize))
                                 .dp_shard_size(size(contract::kDpShardSize))
                                 .tp_size(size(contract::kTpSize))
                                 .cp_size(size(contract::kCpSize))
                                 .pp_size(size(contract::kPpSize));
  }
  if (!out.parallelism_config) return;
  const auto& mesh = *out.parallelism_config;
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"dp_replicate_size", mesh.dp_replicate_size()},
        {"dp_shard_size", mesh.dp_shard_size()},
        {"tp_size", mesh.tp_size()},
        {"cp_size", mesh.cp_size()},
        {"pp_size", mesh.pp_size()}}) {
    TORCH_CHECK(value >= 1, "accel: invalid parallelism_config.", name, ": ", value,
                " (expected an integer >= 1)");
  }
  TORCH_CHECK(!(mesh.dp_replicate_enabled() && !mesh.dp_shard_enabled() &&
                (mesh.tp_enabled() || mesh.cp_enabled())),
              "accel: parallelism_config has dp_replicate_size ", mesh.dp_replicate_size(),
              " with dp_shard_size 1 beside tp_size ", mesh.tp_size(), " and cp_size ",
              mesh.cp_size(),
              "; tensor and context parallelism compose with sharded data parallelism "
              "(as in Accelerate): use dp_shard_size ",
              mesh.dp_replicate_size(),
              " in its place, or keep dp_replicate_size > 1 beside dp_shard_size > 1 for "
              "HYBRID_SHARD");
  if (!mesh.dp_shard_enabled()) return;
  const bool chosen =
      options.sharding_strategy() || distributed::env_string(env, contract::kShardingStrategy);
  if (!chosen) out.sharding_strategy = ShardingStrategy::FullShard;
  if (mesh.dp_replicate_enabled() && out.sharding_strategy == ShardingStrategy::FullShard) {
    out.sharding_strategy = ShardingStrategy::HybridShard;
  }
}

/// FP8 training's settings (after resolve_training_loop): the backend a config names, and no fp16
/// loss scaling beside it (the recipe was parsed where it was set).
void resolve_fp8(const AcceleratorOptions& options, const distributed::EnvLookup& env,
                 ResolvedOptions& out) {
  out.fp8 = options.fp8();
  if (out.mixed_precision != MixedPrecision::Fp8) return;
  if (const auto backend = distributed::env_string(env, contract::kFp8Backend)) {
    std::string upper = *backend;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    TORCH_CHECK(
        upper.empty() || upper == "AO", "accel: ", contract::kFp8Backend,
        " (fp8_config's backend, or --fp8_backend) is '", *backend,
        "', which accel does not include (Transformer Engine and MS-AMP are Python and "
        "CUDA libraries); accel's FP8 follows torchao's recipes: backend AO, or leave it "
        "unset. Accelerate's TE and MSAMP recipes map to Fp8Options().recipe(\"tensorwise\")");
  }
  const GradScalerOptions defaults;
  const auto& scaler = out.grad_scaler;
  const bool changed = scaler.init_scale() != defaults.init_scale() ||
                       scaler.growth_factor() != defaults.growth_factor() ||
                       scaler.backoff_factor() != defaults.backoff_factor() ||
                       scaler.growth_interval() != defaults.growth_interval();
  TORCH_CHECK(!changed || !scaler.enabled(),
              "accel: grad_scaler (fp16 loss scaling) was set with mixed_precision 'fp8', which "
              "scales no loss: its FP8 casts scale each tensor by its own amax and the rest "
              "computes in bf16. Leave grad_scaler unset, or train with mixed_precision 'fp16'");
}

}  // namespace

ResolvedOptions resolve_options(const AcceleratorOptions& options) {
  const auto env = distributed::process_environment();
  ResolvedOptions out;
  resolve_training_loop(options, env, out);
  resolve_fp8(options, env, out);
  resolve_sharding(options, env, out);
  resolve_parallelism(options, env, out);
  resolve_fsdp_features(options, env, out);
  resolve_tracking_and_resume(options, env, out);
  check_ranges(out);
  return out;
}

}  // namespace accel
