#pragma once

// Context parallelism (Accelerate's maybe_context_parallel, torch's context_parallel): the
// processes of a cp group each hold a shard of the sequence, and attention passes K/V blocks
// around the ring so each query still sees every key.

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace accel {

class Accelerator;

/// What `Accelerator::maybe_context_parallel` returns: while it lives, the given tensors are
/// this process's shards of their sequence dimension and accel::scaled_dot_product_attention is
/// ring attention over the cp group; when it ends, the tensors are put back (those not listed
/// in no_restore). A scope that changes nothing where cp_size is 1, so one program runs on every
/// layout.
///
/// The split is load-balanced for causal attention: with the sequence cut in 2 * cp_size
/// chunks, process i holds chunks i and 2 * cp_size - 1 - i, so each does the same work. Give it
/// the model's inputs, targets and positions (a model that builds its positions itself from the
/// shard's length would number the shard, not the sequence). A sequence 2 * cp_size does not
/// divide is refused, naming the buffer, before any buffer changes.
///
/// Example:
/// ```
/// auto positions = torch::arange(tokens.size(1)).expand_as(tokens);
/// auto scope = accelerator.maybe_context_parallel({&tokens, &targets, &positions}, {1, 1, 1});
/// auto loss = criterion(model(tokens, positions), targets);  // on this process's shard
/// accelerator.backward(loss);
/// ```
class ContextParallelScope {
 public:
  ContextParallelScope() = default;
  ContextParallelScope(ContextParallelScope&& other) noexcept;
  ContextParallelScope& operator=(ContextParallelScope&&) = delete;
  ContextParallelScope(const ContextParallelScope&) = delete;
  ContextParallelScope& operator=(const ContextParallelScope&) = delete;
  ~ContextParallelScope();

  /// True when the scope shards anything (cp_size > 1).
  bool active() const { return state_ != nullptr; }

 private:
  friend class Accelerator;
  struct State;
  explicit ContextParallelScope(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

/// LibTorch's scaled_dot_product_attention, with its signature and defaults. Outside a context
/// parallel scope it is `torch::scaled_dot_product_attention`. Inside one it is ring attention:
/// K/V blocks go around the cp group (asynchronous send/recv, overlapped with the block's
/// compute), partial results are merged with their log-sum-exp, causal masking follows the
/// chunks' global positions, and backward passes dK/dV around the ring: exact to unsharded
/// attention within rounding. Under context parallelism `attn_mask` must be empty (use
/// `is_causal`), `dropout_p` 0, and query, key and value hold the same number of heads.
torch::Tensor scaled_dot_product_attention(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value,
                                           const std::optional<torch::Tensor>& attn_mask = {},
                                           double dropout_p = 0.0, bool is_causal = false,
                                           std::optional<double> scale = std::nullopt,
                                           bool enable_gqa = false);

}  // namespace accel
