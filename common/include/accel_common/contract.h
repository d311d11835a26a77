#pragma once

// The launcher/runtime contract: every ACCEL_* variable `accel launch` writes or the runtime reads,
// and the values the choice-valued ones allow. The launcher, the runtime and accel-migrate all
// read their names and choices from here, so that a new choice is added in one place.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accel {
namespace contract {

// ---- Variables the launcher sets (from its flags or the config file) ----------------------------

/// The device mesh, under Accelerate's names (`accelerate launch --use_parallelism_config` writes
/// the same): read only when kUseParallelismConfig is "true".
inline constexpr const char kUseParallelismConfig[] = "ACCELERATE_USE_PARALLELISM_CONFIG";
inline constexpr const char kDpReplicateSize[] = "PARALLELISM_CONFIG_DP_REPLICATE_SIZE";
inline constexpr const char kDpShardSize[] = "PARALLELISM_CONFIG_DP_SHARD_SIZE";
inline constexpr const char kTpSize[] = "PARALLELISM_CONFIG_TP_SIZE";
inline constexpr const char kCpSize[] = "PARALLELISM_CONFIG_CP_SIZE";
inline constexpr const char kPpSize[] = "PARALLELISM_CONFIG_PP_SIZE";
inline constexpr const char kMixedPrecision[] = "ACCEL_MIXED_PRECISION";
/// The FP8 backend a config or `--fp8_backend` names (Accelerate's ACCELERATE_FP8_BACKEND: TE,
/// MSAMP or AO); accel's FP8 follows torchao's recipes ("AO") and refuses the others by name.
inline constexpr const char kFp8Backend[] = "ACCEL_FP8_BACKEND";
inline constexpr const char kGradientAccumulationSteps[] = "ACCEL_GRADIENT_ACCUMULATION_STEPS";
inline constexpr const char kUseCpu[] = "ACCEL_USE_CPU";
inline constexpr const char kShardingStrategy[] = "ACCEL_SHARDING_STRATEGY";
/// FULL_SHARD's units: module class names, comma-separated (Accelerate's
/// fsdp_transformer_layer_cls_to_wrap).
inline constexpr const char kFsdpClassesToWrap[] = "ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP";
/// FULL_SHARD's units by size: the fewest parameters a unit takes (Accelerate's
/// fsdp_min_num_params).
inline constexpr const char kFsdpMinNumParams[] = "ACCEL_FSDP_MIN_NUM_PARAMS";
/// How save_state writes a FULL_SHARD model: FULL_STATE_DICT or SHARDED_STATE_DICT.
inline constexpr const char kFsdpStateDictType[] = "ACCEL_FSDP_STATE_DICT_TYPE";
/// Keep the shards, their gradients and the optimizer state in host memory, and step there
/// (Accelerate's fsdp_offload_params; DeepSpeed's offload_optimizer_device/offload_param_device).
inline constexpr const char kFsdpOffloadParams[] = "ACCEL_FSDP_OFFLOAD_PARAMS";
/// Checkpoint the activations of the units fsdp_transformer_layer_cls_to_wrap names (Accelerate's
/// fsdp_activation_checkpointing).
inline constexpr const char kFsdpActivationCheckpointing[] = "ACCEL_FSDP_ACTIVATION_CHECKPOINTING";
/// The dtype sharded strategies reduce-scatter gradients in: fp32, bf16 or fp16 (FSDP's
/// MixedPrecision reduce_dtype; the mixed precision dtype by default, as in Accelerate).
inline constexpr const char kFsdpReduceDtype[] = "ACCEL_FSDP_REDUCE_DTYPE";
/// FULL_SHARD's prefetch of the next unit in forward (true/false) and in backward (BACKWARD_PRE,
/// BACKWARD_POST or NO_PREFETCH): Accelerate's fsdp_forward_prefetch and fsdp_backward_prefetch.
inline constexpr const char kFsdpForwardPrefetch[] = "ACCEL_FSDP_FORWARD_PREFETCH";
inline constexpr const char kFsdpBackwardPrefetch[] = "ACCEL_FSDP_BACKWARD_PREFETCH";

/// Data-parallel training of a model that does not use every trainable parameter in every step
/// (Accelerate's DistributedDataParallelKwargs find_unused_parameters), or whose used set stays
/// the same from step to step (static_graph): true/false.
inline constexpr const char kDdpFindUnusedParameters[] = "ACCEL_DDP_FIND_UNUSED_PARAMETERS";
inline constexpr const char kDdpStaticGraph[] = "ACCEL_DDP_STATIC_GRAPH";
/// Gradient compression for the all-reduce (Accelerate's DDPCommunicationHookType): no, fp16, bf16.
inline constexpr const char kDdpCommHook[] = "ACCEL_DDP_COMM_HOOK";

/// How many times `accel launch --max_restarts` has restarted this group: 0 on the first start.
inline constexpr const char kRestartCount[] = "ACCEL_RESTART_COUNT";
/// One `accel launch`'s identity, 16 hexadecimal digits, the same in every process and across
/// --max_restarts' restarts (kept when the caller sets it): the MLflow tracker tags its run with it
/// and a restarted group continues that run.
inline constexpr const char kRunId[] = "ACCEL_RUN_ID";
/// "auto": resume from the newest complete checkpoint (set by the launcher on a restart).
inline constexpr const char kResume[] = "ACCEL_RESUME";

/// The built-in trackers to start: tensorboard, csv, jsonl or all, comma-separated.
inline constexpr const char kLogWith[] = "ACCEL_LOG_WITH";

// ---- torchrun's variables ----------------------------------------------------------------------
// The launcher sets them as torchrun does (so a program written against torchrun, or a Python
// one, runs under `accel launch`); the runtime reads them first of the job schedulers' names.

inline constexpr const char kRank[] = "RANK";
inline constexpr const char kWorldSize[] = "WORLD_SIZE";
inline constexpr const char kLocalRank[] = "LOCAL_RANK";
inline constexpr const char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
/// The machine's rank.
inline constexpr const char kGroupRank[] = "GROUP_RANK";
inline constexpr const char kMasterAddr[] = "MASTER_ADDR";
inline constexpr const char kMasterPort[] = "MASTER_PORT";
/// kRestartCount's and --max_restarts' torchelastic names.
inline constexpr const char kTorchelasticRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char kTorchelasticMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";

// ---- SLURM's variables, read by both sides ------------------------------------------------------

inline constexpr const char kSlurmJobId[] = "SLURM_JOB_ID";
inline constexpr const char kSlurmNodes[] = "SLURM_NNODES";
inline constexpr const char kSlurmNodeId[] = "SLURM_NODEID";
/// The job's hosts; the first is the main process's (SLURM_JOB_NODELIST is the newer name).
inline constexpr const char kSlurmJobNodeList[] = "SLURM_JOB_NODELIST";
inline constexpr const char kSlurmNodeList[] = "SLURM_NODELIST";

// ---- Variables only the user sets ---------------------------------------------------------------

inline constexpr const char kDevicePlacement[] = "ACCEL_DEVICE_PLACEMENT";
inline constexpr const char kSplitBatches[] = "ACCEL_SPLIT_BATCHES";
inline constexpr const char kEvenBatches[] = "ACCEL_EVEN_BATCHES";
inline constexpr const char kStepSchedulerWithOptimizer[] = "ACCEL_STEP_SCHEDULER_WITH_OPTIMIZER";
inline constexpr const char kFusedOptimizer[] = "ACCEL_FUSED_OPTIMIZER";
inline constexpr const char kSeed[] = "ACCEL_SEED";
/// Seconds that rendezvous and collectives may wait.
inline constexpr const char kTimeout[] = "ACCEL_TIMEOUT";
/// 1: collectives first check that every process passes matching shapes.
inline constexpr const char kDebug[] = "ACCEL_DEBUG";
/// How many collectives each process's flight recorder keeps per backend (0: off; default 64).
inline constexpr const char kFlightRecorder[] = "ACCEL_FLIGHT_RECORDER";
/// Seconds a collective may wait before every process's flight record is written (default 300).
inline constexpr const char kHangWatchdog[] = "ACCEL_HANG_WATCHDOG";
/// Set by `accel launch`: the folder where each process writes rank-R.record (and rank-R.alert
/// when a collective has waited past the watchdog or failed).
inline constexpr const char kFlightRecordDir[] = "ACCEL_FLIGHT_RECORD_DIR";
/// The launcher's exit code when the processes' records prove that they wait in different
/// collectives (or that a peer they wait for has exited): the job would never finish.
inline constexpr int kHangExitCode = 86;
/// Where `accel config` keeps default_config.yaml.
inline constexpr const char kHome[] = "ACCEL_HOME";
/// accel::get_logger's level (Accelerate's ACCELERATE_LOG_LEVEL is read after it).
inline constexpr const char kLogLevel[] = "ACCEL_LOG_LEVEL";

// ---- Choices ------------------------------------------------------------------------------------

/// `mixed_precision`: "no" first, the default.
const std::vector<std::string>& mixed_precision_choices();
/// `sharding_strategy` (FSDP's names): "NO_SHARD" first, the default.
const std::vector<std::string>& sharding_strategy_choices();
/// `fsdp_state_dict_type`: "FULL_STATE_DICT" first, the default.
const std::vector<std::string>& state_dict_type_choices();
/// `ddp_comm_hook` (Accelerate's DDPCommunicationHookType, less PowerSGD): "no" first, the
/// default.
const std::vector<std::string>& ddp_comm_hook_choices();
/// `distributed_type` as `accel config` writes it.
const std::vector<std::string>& distributed_type_choices();

/// True when `value` is one of `choices`.
bool is_one_of(const std::string& value, const std::vector<std::string>& choices);
/// "a, b, c", for error messages and help texts.
std::string join(const std::vector<std::string>& choices);

/// A boolean ACCEL_* variable's value: 1/0, true/false, yes/no or on/off, in any case; none for
/// anything else.
std::optional<bool> parse_bool(const std::string& value);

/// A whole number, the whole text: an optional '-' or '+', then decimal digits, nothing before or
/// after ("29500x", " 8", "8.0", "" and out-of-range values give none). The launcher's options,
/// config files and answers, and the variables both sides read (MASTER_PORT, WORLD_SIZE, RANK,
/// ACCEL_TIMEOUT, ...) all go through it, so the two sides accept the same values.
std::optional<int64_t> parse_integer(std::string_view text);

/// A duration in seconds, the whole text: a decimal number above 0 and below 10^9 ("300", "0.5");
/// none for anything else. ACCEL_TIMEOUT and ACCEL_HANG_WATCHDOG both go through it.
std::optional<std::chrono::milliseconds> parse_seconds(std::string_view text);

}  // namespace contract
}  // namespace accel
