#pragma once

// Tensor parallelism from a plan (Accelerate's and transformers' tp_plan, DTensor's
// ColwiseParallel/RowwiseParallel): which layers of a model are split across the processes of
// a tensor-parallel group, and how.

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace accel {

/// Module-name patterns over `named_modules()` and the style each matched module is split in.
/// A pattern's `*` stands for one name component ("blocks.*.attn.q" matches "blocks.0.attn.q").
///
/// Styles (transformers' names; both spellings of the replicated-side styles are accepted):
/// - "colwise" (a Linear): each process keeps out_features / tp rows of the weight and bias; its
///   output stays sharded over the features. The gradient of its input is summed over the group.
/// - "rowwise" (a Linear): each process keeps in_features / tp columns of the weight and takes
///   the matching slice of the input (a colwise layer's output); the partial products are
///   all-reduced, then the bias, whole on every process, is added.
/// - "colwise_rep" / "colwise_gather_output": colwise, with the output all-gathered whole.
/// - "rowwise_rep" / "rowwise_split_input": rowwise, taking a whole input and keeping its slice.
/// - "embedding_rowwise" (an Embedding): each process keeps num_embeddings / tp rows of the
///   table and looks up the ids that fall in them; the lookups are all-reduced.
/// - "replicate": whole on every process (for documentation; unplanned modules are too).
/// - "sequence_parallel" (a LayerNorm, Dropout or Embedding): Megatron's sequence parallelism.
///   With any such entry, activations between split layers are sharded on the sequence
///   (dimension 1): colwise inputs are all-gathered on it and rowwise outputs (and
///   embedding_rowwise lookups) reduce-scattered onto it; a sequence_parallel Embedding's lookups
///   are split on it; the LayerNorms' and rowwise biases' gradients are summed over the group.
///   Attention must take its shapes from q, k and v, which hold the whole sequence.
///
/// Attention splits by heads when q, k and v are colwise and the output projection rowwise, and
/// the model reshapes its q/k/v with -1 heads (`view({batch, seq, -1, head_dim})`).
///
/// Example:
/// ```
/// accelerator.prepare(model, accel::TensorParallelPlan{{"blocks.*.attn.q", "colwise"},
///                                                      {"blocks.*.attn.k", "colwise"},
///                                                      {"blocks.*.attn.v", "colwise"},
///                                                      {"blocks.*.attn.o", "rowwise"},
///                                                      {"blocks.*.mlp.up", "colwise"},
///                                                      {"blocks.*.mlp.down", "rowwise"}});
/// auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters()));  // after
/// ```
class TensorParallelPlan {
 public:
  TensorParallelPlan() = default;
  TensorParallelPlan(std::initializer_list<std::pair<std::string, std::string>> entries)
      : entries_(entries) {}
  /// Adds one pattern; chained.
  TensorParallelPlan& add(std::string pattern, std::string style) {
    entries_.emplace_back(std::move(pattern), std::move(style));
    return *this;
  }
  const std::vector<std::pair<std::string, std::string>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
};

}  // namespace accel
