#pragma once

#include <accel/activation_checkpoint.h>
#include <accel/autocast.h>
#include <accel/checkpointing.h>
#include <accel/ddp_options.h>
#include <accel/fp8.h>
#include <accel/grad_scaler.h>
#include <accel/mixed_precision.h>
#include <accel/parallelism.h>
#include <accel/sharding_strategy.h>
#include <accel/tracking.h>

#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel {

/// Options for `accel::Accelerator`.
///
/// Every field is optional. A value set here wins; an unset field is read from the environment
/// variable the launcher writes (named on each field), and falls back to the default shown.
///
/// Example:
/// ```
/// accel::Accelerator accelerator(accel::AcceleratorOptions()
///                                    .gradient_accumulation_steps(4)
///                                    .split_batches(true));
/// ```
struct AcceleratorOptions {
  /// Move prepared models and data-loader batches to `device()` (`ACCEL_DEVICE_PLACEMENT`,
  /// default true).
  TORCH_ARG(std::optional<bool>, device_placement) = std::nullopt;

  /// The data loader's batch size is the global batch, split across processes, instead of the
  /// per-process batch (`ACCEL_SPLIT_BATCHES`, default false).
  TORCH_ARG(std::optional<bool>, split_batches) = std::nullopt;

  /// Complete the last round of batches by cycling from the start of the data set so that every
  /// process sees the same number of batches (`ACCEL_EVEN_BATCHES`, default true).
  TORCH_ARG(std::optional<bool>, even_batches) = std::nullopt;

  /// How autocast scopes (`autocast()`, `accumulate()`, `forward()`) autocast under mixed
  /// precision (Accelerate's AutocastKwargs): on, with LibTorch's cache of casted weights, by
  /// default.
  TORCH_ARG(AutocastOptions, autocast) = {};

  /// Number of micro-steps whose gradients are accumulated before the optimizer steps
  /// (`ACCEL_GRADIENT_ACCUMULATION_STEPS`, default 1).
  TORCH_ARG(std::optional<int64_t>, gradient_accumulation_steps) = std::nullopt;

  /// Average the gradients on every micro-step of an accumulation window, not only the last
  /// (Accelerate's GradientAccumulationPlugin sync_each_batch; default false): more
  /// communication, but no process holds unaveraged gradients across micro-steps, which under
  /// SHARD_GRAD_OP and FULL_SHARD means a shard's gradients rather than whole ones. The weights
  /// are the same either way.
  TORCH_ARG(bool, sync_each_batch) = false;

  /// End the accumulation window at the end of each pass over a prepared loader, whatever its
  /// count (Accelerate's GradientAccumulationPlugin sync_with_dataloader; default true). With
  /// false, windows run on across passes: every window is gradient_accumulation_steps
  /// micro-steps, and a pass that does not divide into them leaves its last window open into the
  /// next pass, as one long stream of batches would.
  TORCH_ARG(bool, sync_with_dataloader) = true;

  /// The generators prepared loaders copy from the main process to every process when they start
  /// a pass (Accelerate's rng_types): "generator" (the order a shuffling sampler draws), "torch"
  /// (LibTorch's default CPU generator, so that dropout and augmentation draw alike everywhere)
  /// and "cuda" (the current CUDA device's). Default {"generator"}. A shuffled order is the main
  /// process's whether "generator" is listed or not: processes drawing their own would read
  /// overlapping shards. save_state saves every generator, whichever are listed.
  TORCH_ARG(std::vector<std::string>, rng_types) = std::vector<std::string>{"generator"};

  /// Run on the CPU even where CUDA is available (`ACCEL_USE_CPU`, default false).
  TORCH_ARG(std::optional<bool>, cpu) = std::nullopt;

  /// "no", "bf16", "fp16" or "fp8" (`ACCEL_MIXED_PRECISION`, default "no"). bf16 autocasts inside
  /// `accumulate()` and `autocast()` scopes (CPU, and CUDA devices that have bf16); fp16 does too
  /// and scales the loss (CUDA only). fp8 is bf16 with the Linears `fp8` selects computing their
  /// matmuls in FP8 (CPU, and CUDA devices of compute capability 8.9 or newer; accel/fp8.h).
  TORCH_ARG(std::optional<std::string>, mixed_precision) = std::nullopt;

  /// FP8 training's recipe and Linears (Accelerate's AORecipeKwargs); used with "fp8" only.
  TORCH_ARG(Fp8Options, fp8) = {};

  /// The fp16 loss scaler's settings (Accelerate's GradScalerKwargs); used with fp16 only.
  TORCH_ARG(GradScalerOptions, grad_scaler) = {};

  /// Gradient bucketing in data-parallel training.
  TORCH_ARG(DistributedDataParallelOptions, ddp) = {};

  /// Where save_state() keeps checkpoints and how many, and where trackers write (see
  /// ProjectConfiguration).
  TORCH_ARG(ProjectConfiguration, project_config) = {};

  /// resume_if_possible() loads the newest checkpoint (`ACCEL_RESUME=auto`, which
  /// `accel launch --max_restarts` sets when it restarts a failed group; "no" or unset: it does
  /// not).
  TORCH_ARG(std::optional<bool>, resume) = std::nullopt;

  /// The built-in trackers init_trackers starts (`ACCEL_LOG_WITH`, comma-separated):
  /// "tensorboard", "csv", "jsonl", or "all" of them.
  TORCH_ARG(std::vector<std::string>, log_with);

  /// The program's own trackers (see accel/tracking.h), started beside log_with's.
  TORCH_ARG(std::vector<std::shared_ptr<GeneralTracker>>, trackers);

  /// Prepared schedulers step once per optimizer step, times the number of processes unless
  /// `split_batches` is set (`ACCEL_STEP_SCHEDULER_WITH_OPTIMIZER`, default true).
  TORCH_ARG(std::optional<bool>, step_scheduler_with_optimizer) = std::nullopt;

  /// Prepared `torch::optim::AdamW`, `Adam` and `SGD` step in one pass over each parameter
  /// instead of about ten ops, keeping LibTorch's optimizer state (`ACCEL_FUSED_OPTIMIZER`,
  /// default true). On the CPU the result is bit for bit LibTorch's own step; on CUDA the step is
  /// ATen's fused kernels (PyTorch's `fused=True`), equal to LibTorch's to float rounding.
  TORCH_ARG(std::optional<bool>, fused_optimizer) = std::nullopt;

  /// On several processes, a prepared optimizer's first step refuses parameters that no prepared
  /// model holds: nothing averages their gradients, so every process would train a different
  /// model (the usual cause: `accelerator.prepare(model)` missing). A program whose optimizer
  /// trains parameters meant to be each process's own says so here (default false).
  TORCH_ARG(bool, allow_unprepared_parameters) = false;

  /// Seed of the shuffling of prepared data loaders; epoch e shuffles with seed + e on every
  /// process (`ACCEL_SEED`). Without it, loaders shuffle with the main process's default CPU
  /// generator, consuming it as a plain LibTorch loader does.
  TORCH_ARG(std::optional<uint64_t>, seed) = std::nullopt;

  /// How training is spread over the processes (`ACCEL_SHARDING_STRATEGY`, default "NO_SHARD"):
  /// - "NO_SHARD": data parallel; every process holds everything, gradients are all-reduced.
  /// - "SHARD_OPTIMIZER_STATE" (ZeRO-1): gradients are all-reduced during backward; each process
  ///   keeps the optimizer state of 1/N of the parameters and steps only those, and the updated
  ///   parameters are all-gathered.
  /// - "SHARD_GRAD_OP" (ZeRO-2): as ZeRO-1, but gradients are reduce-scattered after backward,
  ///   so each process keeps 1/N of them between steps too.
  /// - "FULL_SHARD" (ZeRO-3): as ZeRO-2, and the parameters are sharded too: each process holds
  ///   1/N of them, and a unit's parameters are gathered whole for the operators that use them,
  ///   in forward and again in backward, then freed (see README, "FULL_SHARD"). Prepare the model
  ///   before its optimizer.
  /// - "HYBRID_SHARD": FULL_SHARD within each machine, replicated across machines: a process
  ///   holds 1/(processes per machine) of everything, units are gathered from this machine's
  ///   processes only, and each gradient slice is reduce-scattered on the machine, then
  ///   all-reduced with the same slice of the other machines. Refused on one machine.
  TORCH_ARG(std::optional<std::string>, sharding_strategy) = std::nullopt;

  /// FULL_SHARD's units (FSDP's transformer auto-wrap policy): each submodule whose class is
  /// named here (as `Module::name()` gives it, with or without namespace and a TORCH_MODULE
  /// "Impl" suffix: "Block", "BlockImpl", "torch::nn::Linear") is one unit; the parameters of no
  /// such module make the root's (`ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP`, comma-separated). Empty,
  /// and no fsdp_min_num_params: units of consecutive parameters of about ddp.bucket_cap_mb. A
  /// name that matches no module of the model is an error.
  TORCH_ARG(std::vector<std::string>, fsdp_transformer_layer_cls_to_wrap);

  /// FULL_SHARD's units by size (FSDP's size-based auto-wrap policy, `ACCEL_FSDP_MIN_NUM_PARAMS`):
  /// from the leaves up, each submodule holding at least this many parameters not in a unit yet
  /// becomes a unit; the rest make the root's. Set this or the classes above, not both.
  TORCH_ARG(std::optional<int64_t>, fsdp_min_num_params) = std::nullopt;

  /// How save_state writes a FULL_SHARD model (`ACCEL_FSDP_STATE_DICT_TYPE`):
  /// "FULL_STATE_DICT" (the default): the whole weights, gathered for the main process to write;
  /// "SHARDED_STATE_DICT": each process writes its shards, no process gathers anything, and
  /// process 0 writes an index; `accel merge-weights` turns it into model.safetensors.
  TORCH_ARG(std::optional<std::string>, fsdp_state_dict_type) = std::nullopt;

  /// CPU offload of a sharded run (FSDP's `offload_params`, DeepSpeed's ZeRO-Offload;
  /// `ACCEL_FSDP_OFFLOAD_PARAMS`): each process's shards of the parameters (the fp32 values the
  /// optimizer steps), their gradients and the optimizer state live in host memory (pinned when
  /// the model is on a GPU), and the optimizer steps there. Forward and backward still run on
  /// the device: a reduced gradient slice is copied to the host, and an updated slice back before
  /// the all-gather. With FULL_SHARD the device then holds only the units gathered at the moment.
  /// Needs a sharding strategy other than NO_SHARD. On one process, where a strategy alone would
  /// change nothing, it applies with offload: the one "shard" is the whole model, kept on the
  /// host (a model whose optimizer state does not fit on its one GPU).
  TORCH_ARG(std::optional<bool>, fsdp_offload_params) = std::nullopt;

  /// Activation checkpointing of the units (FSDP's `activation_checkpointing`,
  /// `ACCEL_FSDP_ACTIVATION_CHECKPOINTING`): prepare(model) wraps every submodule whose class
  /// fsdp_transformer_layer_cls_to_wrap names in an accel::CheckpointWrapper, so forward keeps
  /// only each unit's input and backward computes the unit again. The units must be elements of
  /// a torch::nn::Sequential; one that is not is an error naming it (checkpoint it in its
  /// caller's forward with accel::checkpoint). Needs fsdp_transformer_layer_cls_to_wrap; works
  /// under every sharding strategy.
  TORCH_ARG(std::optional<bool>, fsdp_activation_checkpointing) = std::nullopt;
  /// Which of those blocks fsdp_activation_checkpointing checkpoints, and how (every one by
  /// default; every k-th, torchtitan's selective mode; their inputs offloaded to host memory).
  TORCH_ARG(CheckpointPolicy, activation_checkpointing_policy) = {};

  /// The dtype gradients are reduce-scattered in under SHARD_GRAD_OP, FULL_SHARD and
  /// HYBRID_SHARD (FSDP's MixedPrecision `reduce_dtype`; `ACCEL_FSDP_REDUCE_DTYPE`): "fp32",
  /// "bf16" or "fp16". The default is Accelerate's: the mixed_precision dtype (bf16 under "bf16"
  /// and "fp8", fp16 under "fp16"), fp32 without mixed precision. Under bf16 the reduce-scatters
  /// move half the bytes and each slice is summed in bf16 (within N * 2^-8 of the fp32 sum);
  /// "fp32" keeps every strategy's gradients those of NO_SHARD. The shards, their gradients and
  /// the optimizer stay in the parameters' dtype either way.
  TORCH_ARG(std::optional<std::string>, fsdp_reduce_dtype) = std::nullopt;

  /// FULL_SHARD's prefetch (FSDP's `forward_prefetch` and `backward_prefetch`;
  /// `ACCEL_FSDP_FORWARD_PREFETCH`, `ACCEL_FSDP_BACKWARD_PREFETCH`): while a unit runs, the next
  /// unit's all-gather is already under way, in the order the units were gathered the step
  /// before, within the two units whole at a time. Forward prefetch is off by default, as in
  /// Accelerate; backward prefetch is "BACKWARD_PRE" (on), "BACKWARD_POST" (taken as
  /// BACKWARD_PRE: accel has one prefetch point) or "NO_PREFETCH" (the default, as in
  /// Accelerate). The gathered values, and so the training, are the same either way.
  TORCH_ARG(std::optional<bool>, fsdp_forward_prefetch) = std::nullopt;
  TORCH_ARG(std::optional<std::string>, fsdp_backward_prefetch) = std::nullopt;

  /// The device mesh (see accel/parallelism.h). Unset, it is read from the variables
  /// `accelerate launch --use_parallelism_config` and `accel launch --use_parallelism_config` set
  /// (`ACCELERATE_USE_PARALLELISM_CONFIG=true`, `PARALLELISM_CONFIG_DP_REPLICATE_SIZE`,
  /// `..._DP_SHARD_SIZE`, `..._TP_SIZE`, `..._CP_SIZE`); without either, the job is plain data
  /// parallel as the sharding strategy says. With one, dp_shard_size > 1 shards with the
  /// sharding strategy (FULL_SHARD when none is set), and dp_replicate_size > 1 beside it is
  /// HYBRID_SHARD over the two dimensions.
  TORCH_ARG(std::optional<ParallelismConfig>, parallelism_config) = std::nullopt;

  /// How long rendezvous and collectives may wait for the other processes
  /// (`ACCEL_TIMEOUT` in seconds, default 1800 s). Applies when the process group is created,
  /// that is, by the first Accelerator of the process.
  TORCH_ARG(std::optional<std::chrono::milliseconds>, timeout) = std::nullopt;
};

/// The dtype sharded gradients are reduced in (fsdp_reduce_dtype).
enum class ReduceDtype { Fp32, Bf16, Fp16 };

/// The sharded strategies' settings as resolved from AcceleratorOptions' `fsdp_*` fields and
/// their `ACCEL_FSDP_*` variables (Accelerate's FullyShardedDataParallelPlugin); see those fields.
struct FsdpOptions {
  /// The classes whose modules are the units; empty: min_num_params or the whole model.
  std::vector<std::string> transformer_layer_cls_to_wrap;
  /// Units of at least this many parameters; 0: not set.
  int64_t min_num_params = 0;
  StateDictType state_dict_type = StateDictType::FullStateDict;
  /// The shards and their optimizer state live in host memory between uses.
  bool offload_params = false;
  /// The units are checkpointed as `activation_checkpointing_policy` says.
  bool activation_checkpointing = false;
  CheckpointPolicy activation_checkpointing_policy;
  ReduceDtype reduce_dtype = ReduceDtype::Fp32;
  bool forward_prefetch = false;
  /// BACKWARD_PRE or BACKWARD_POST (one prefetch point); false: NO_PREFETCH.
  bool backward_prefetch = false;
};

/// `AcceleratorOptions` with every field resolved against the environment and the defaults, as
/// `Accelerator::options()` returns it: each field means what the AcceleratorOptions field of its
/// name says, with the choices parsed into their enums.
struct ResolvedOptions {
  bool device_placement = true;
  bool split_batches = false;
  bool even_batches = true;
  int64_t gradient_accumulation_steps = 1;
  bool sync_each_batch = false;
  bool sync_with_dataloader = true;
  /// rng_types: whether a pass starts by copying the main process's CPU / CUDA generator.
  bool synchronize_cpu_generator = false;
  bool synchronize_cuda_generator = false;
  AutocastOptions autocast;
  bool cpu = false;
  MixedPrecision mixed_precision = MixedPrecision::No;
  Fp8Options fp8;  // its recipe checked
  GradScalerOptions grad_scaler;
  DistributedDataParallelOptions ddp;
  ProjectConfiguration project_config;
  std::vector<std::string> log_with;  // built-in tracker names, "all" expanded
  bool resume = false;
  std::vector<std::shared_ptr<GeneralTracker>> trackers;
  bool step_scheduler_with_optimizer = true;
  bool fused_optimizer = true;
  bool allow_unprepared_parameters = false;
  std::optional<uint64_t> seed;
  ShardingStrategy sharding_strategy = ShardingStrategy::NoShard;
  /// How the sharded strategies cut, wrap, prefetch and save.
  FsdpOptions fsdp;
  std::chrono::milliseconds timeout{std::chrono::seconds(1800)};
  /// The device mesh, when the program or the launcher gave one (sizes checked, not yet against
  /// the number of processes: the Accelerator does that).
  std::optional<ParallelismConfig> parallelism_config;
  /// `ACCEL_DEBUG=1`: collectives first check that every process passes matching shapes, and
  /// prepared optimizers compare the processes' parameters after each step.
  bool debug = false;
};

/// Resolves `options` against the `ACCEL_*` environment variables (a value set in code wins) and
/// validates the result. Throws `c10::Error` naming the variable or field and the expected values.
ResolvedOptions resolve_options(const AcceleratorOptions& options);

}  // namespace accel
