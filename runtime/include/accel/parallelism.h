#pragma once

// The job's device mesh (Accelerate's ParallelismConfig, after torchtitan's ParallelDims): the
// processes laid out as pp × dp_replicate × dp_shard × cp × tp, tensor parallelism innermost so
// that a tensor-parallel group stays on one machine, pipeline stages outermost so that only
// activations cross between the groups of machines that hold different stages.

#include <torch/arg.h>

#include <cstdint>

namespace accel {

/// How many processes each dimension of the mesh spans; every size is 1 by default, and the
/// sizes multiply to the job's number of processes.
///
/// - dp_replicate: data parallelism whose processes hold the whole model (or HYBRID_SHARD's
///   replicas, with dp_shard);
/// - dp_shard: data parallelism whose processes shard the model (the sharding strategy's;
/// FULL_SHARD
///   when none is set);
/// - cp: context parallelism, each process holding a shard of the sequence;
/// - tp: tensor parallelism, each process holding a slice of the planned layers;
/// - pp: pipeline parallelism, each process holding some of the stages a Sequential is cut into
///   (Accelerator::prepare_pipeline, accel/pipeline.h).
///
/// The processes of one data rank (the same dp_replicate and dp_shard coordinates, every pp, tp
/// and cp one) read the same batches; gradients average over dp_replicate × dp_shard × cp among
/// the processes of one stage.
///
/// Example:
/// ```
/// accel::Accelerator accelerator(accel::AcceleratorOptions().parallelism_config(
///     accel::ParallelismConfig().dp_shard_size(2).tp_size(2)));
/// ```
struct ParallelismConfig {
  /// The number of processes the mesh spans.
  int64_t total_size() const {
    return pp_size_ * dp_replicate_size_ * dp_shard_size_ * tp_size_ * cp_size_;
  }
  /// The number of data ranks: processes that read different batches.
  int64_t data_parallel_size() const { return dp_replicate_size_ * dp_shard_size_; }
  /// The processes of one data rank.
  int64_t non_data_parallel_size() const { return pp_size_ * tp_size_ * cp_size_; }
  bool dp_replicate_enabled() const { return dp_replicate_size_ > 1; }
  bool dp_shard_enabled() const { return dp_shard_size_ > 1; }
  bool tp_enabled() const { return tp_size_ > 1; }
  bool cp_enabled() const { return cp_size_ > 1; }
  bool pp_enabled() const { return pp_size_ > 1; }

  // The sizes (after the derived ones: TORCH_ARG leaves what follows it private).
  TORCH_ARG(int64_t, dp_replicate_size) = 1;
  TORCH_ARG(int64_t, dp_shard_size) = 1;
  TORCH_ARG(int64_t, tp_size) = 1;
  TORCH_ARG(int64_t, cp_size) = 1;
  TORCH_ARG(int64_t, pp_size) = 1;
};

}  // namespace accel
