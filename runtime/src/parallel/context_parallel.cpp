// Context parallelism's scope and accel::scaled_dot_product_attention: see
// accel/context_parallel.h.

#include <accel/accelerator.h>
#include <accel/context_parallel.h>

#include "core/accelerator_impl.h"
#include "ring_attention.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <string>
#include <utility>

namespace accel {
namespace {

/// The cp group of the innermost context-parallel scope open on this thread; null outside one.
thread_local c10d::ProcessGroup* t_context_group = nullptr;

/// Process `rank`'s load-balanced shard of `tensor` along `dim`: chunks rank and
/// 2 * cp - 1 - rank of 2 * cp.
torch::Tensor load_balanced_shard(const torch::Tensor& tensor, int64_t dim, int64_t rank,
                                  int64_t cp, size_t index) {
  TORCH_CHECK(dim >= -tensor.dim() && dim < tensor.dim(), "accel: maybe_context_parallel's buffer ",
              index, " has ", tensor.dim(), " dimensions; its sequence dimension ", dim,
              " is not one of them");
  const int64_t length = tensor.size(dim);
  TORCH_CHECK(length % (2 * cp) == 0, "accel: maybe_context_parallel's buffer ", index,
              " has a sequence of ", length, " along dimension ", dim,
              ", which 2 * cp_size = ", 2 * cp,
              " does not divide (the load-balanced split for causal attention cuts it in 2 * "
              "cp_size chunks); pad the sequence to a multiple of ",
              2 * cp);
  const int64_t chunk = length / (2 * cp);
  return torch::cat({tensor.narrow(dim, rank * chunk, chunk),
                     tensor.narrow(dim, (2 * cp - 1 - rank) * chunk, chunk)},
                    dim);
}

}  // namespace

struct ContextParallelScope::State {
  std::vector<torch::Tensor*> buffers;
  std::vector<torch::Tensor> originals;
  std::vector<bool> restore;
  c10d::ProcessGroup* previous = nullptr;
};

ContextParallelScope::ContextParallelScope(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
ContextParallelScope::ContextParallelScope(ContextParallelScope&& other) noexcept
    : state_(std::move(other.state_)) {}
ContextParallelScope::~ContextParallelScope() {
  if (!state_) return;
  t_context_group = state_->previous;
  for (size_t i = 0; i < state_->buffers.size(); ++i) {
    if (state_->restore[i]) *state_->buffers[i] = std::move(state_->originals[i]);
  }
}

ContextParallelScope Accelerator::maybe_context_parallel(
    const std::vector<torch::Tensor*>& buffers, const std::vector<int64_t>& buffer_seq_dims,
    const std::vector<torch::Tensor*>& no_restore_buffers) {
  TORCH_CHECK(buffers.size() == buffer_seq_dims.size(), "accel: maybe_context_parallel was given ",
              buffers.size(), " buffers and ", buffer_seq_dims.size(),
              " sequence dimensions; give one dimension per buffer");
  if (impl_->mesh == nullptr || !impl_->mesh->config().cp_enabled()) return ContextParallelScope();
  auto& group = *impl_->mesh->group(detail::MeshGroup::cp);
  const int64_t cp = group.getSize(), rank = group.getRank();
  // Every shard is computed before any buffer changes: a refusal leaves them all as they were.
  std::vector<torch::Tensor> shards;
  for (size_t i = 0; i < buffers.size(); ++i) {
    TORCH_CHECK(buffers[i] != nullptr && buffers[i]->defined(),
                "accel: maybe_context_parallel's buffer ", i, " is empty");
    shards.push_back(load_balanced_shard(*buffers[i], buffer_seq_dims[i], rank, cp, i));
  }
  auto state = std::make_unique<ContextParallelScope::State>();
  for (size_t i = 0; i < buffers.size(); ++i) {
    state->buffers.push_back(buffers[i]);
    state->originals.push_back(std::exchange(*buffers[i], std::move(shards[i])));
    state->restore.push_back(std::find(no_restore_buffers.begin(), no_restore_buffers.end(),
                                       buffers[i]) == no_restore_buffers.end());
  }
  state->previous = t_context_group;
  t_context_group = &group;
  return ContextParallelScope(std::move(state));
}

torch::Tensor scaled_dot_product_attention(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value,
                                           const std::optional<torch::Tensor>& attn_mask,
                                           double dropout_p, bool is_causal,
                                           std::optional<double> scale, bool enable_gqa) {
  if (t_context_group == nullptr) {
    return torch::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                               scale, enable_gqa);
  }
  TORCH_CHECK(!attn_mask.has_value() || !attn_mask->defined(),
              "accel: scaled_dot_product_attention under context parallelism takes no attn_mask "
              "(each process holds a shard of the sequence); use is_causal=true for a causal "
              "mask");
  TORCH_CHECK(dropout_p == 0.0,
              "accel: scaled_dot_product_attention under context parallelism "
              "takes no dropout (dropout_p ",
              dropout_p, ")");
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
              "accel: scaled_dot_product_attention under context parallelism takes [batch, "
              "heads, sequence, head_dim] tensors; got query ",
              query.sizes(), ", key ", key.sizes(), ", value ", value.sizes());
  auto k = key, v = value;
  if (enable_gqa && k.size(1) != query.size(1)) {
    TORCH_CHECK(query.size(1) % k.size(1) == 0, "accel: enable_gqa needs the query's ",
                query.size(1), " heads to be a multiple of the key's ", k.size(1));
    k = k.repeat_interleave(query.size(1) / k.size(1), 1);
    v = v.repeat_interleave(query.size(1) / v.size(1), 1);
  }
  TORCH_CHECK(
      k.size(1) == query.size(1) && v.size(1) == query.size(1) && k.size(2) == query.size(2),
      "accel: scaled_dot_product_attention under context parallelism needs query, key "
      "and value of the same heads and sequence shard; got query ",
      query.sizes(), ", key ", key.sizes(), ", value ", value.sizes());
  return detail::ring_attention(query, k, v, *t_context_group, is_causal, scale);
}

}  // namespace accel
