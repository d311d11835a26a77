#pragma once

// Data-parallel gradient synchronisation's options (AcceleratorOptions::ddp), apart so that the
// code that synchronises (runtime/src/distributed) needs no more of the options.

#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <string_view>

namespace accel {

/// How data-parallel gradients are compressed for their all-reduce (Accelerate's
/// DDPCommunicationHookType), spelled "no", "fp16" and "bf16" (contract::ddp_comm_hook_choices).
enum class DdpCommHook { No, Fp16, Bf16 };
const char* to_string(DdpCommHook hook);
/// The hook `name` spells; none for another name (accel has no PowerSGD hook).
std::optional<DdpCommHook> parse_ddp_comm_hook(std::string_view name);

/// How data-parallel training synchronises gradients (Accelerate's DistributedDataParallelKwargs).
///
/// Gradients are averaged by c10d's Reducer, the engine of DistributedDataParallel: they are
/// gathered into buckets in the order backward produces them, and each bucket's all-reduce starts
/// as soon as it is full, while the rest of backward runs.
struct DistributedDataParallelOptions {
  /// Size of each bucket after the first (1 MiB) one, in MiB. Smaller buckets start
  /// communicating earlier in backward; larger ones make fewer, more efficient collectives.
  TORCH_ARG(int64_t, bucket_cap_mb) = 25;
  /// Gradients are views into the buckets instead of copies of them, which saves one copy of every
  /// gradient each step and the memory of the copies. Unlike under PyTorch's DDP, where this
  /// defaults to false because `Optimizer::zero_grad` cannot detach a view in place, accel turns
  /// each gradient back into a plain tensor over the bucket's memory at the end of `backward()`,
  /// so every `zero_grad` works; hence the default true.
  TORCH_ARG(bool, gradient_as_bucket_view) = true;
  /// The model may leave some trainable parameters out of a step: a branch taken on some steps
  /// or some processes, a head per task, experts (`ACCEL_DDP_FIND_UNUSED_PARAMETERS`, default
  /// false). A parameter that no process used in an accumulation window keeps an undefined
  /// gradient, so the optimizer leaves it (and its state) alone, as on one process; one that some
  /// process used gets the average over all, counting zeros for the others. Without it, a step
  /// in which some process's loss does not reach a parameter raises an error naming it.
  TORCH_ARG(std::optional<bool>, find_unused_parameters) = std::nullopt;
  /// As find_unused_parameters, for a model whose set of used parameters is the same on every
  /// step (`ACCEL_DDP_STATIC_GRAPH`, default false): the set is learnt at the first
  /// synchronising step, and a step that uses a different set raises an error naming the
  /// parameters. Not together with find_unused_parameters.
  TORCH_ARG(std::optional<bool>, static_graph) = std::nullopt;
  /// Compress the gradients for their all-reduce (`ACCEL_DDP_COMM_HOOK`, default
  /// DdpCommHook::No). With Fp16 or Bf16 each bucket is cast, divided by the process count,
  /// summed in that dtype and cast back: half the bytes on the wire, and the dtype's rounding in
  /// the averaged gradients. NO_SHARD and SHARD_OPTIMIZER_STATE, which all-reduce; the others
  /// reduce-scatter in fsdp_reduce_dtype.
  /// By name: "no", "fp16" or "bf16"; another name throws here, naming the choices.
 public:  // TORCH_ARG leaves what follows it private
  DistributedDataParallelOptions& comm_hook(std::string_view name);
  TORCH_ARG(std::optional<DdpCommHook>, comm_hook) = std::nullopt;
};

}  // namespace accel
