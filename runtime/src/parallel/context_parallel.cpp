// accel::scaled_dot_product_attention and the context-parallel shards: see context_parallel.h.

#include "context_parallel.h"

#include <accel/context_parallel.h>

#include "ring_attention.h"

#include <c10/util/Exception.h>

#include <utility>

namespace accel {
namespace parallel {
namespace {

/// The cp group of the innermost context-parallel scope open on this thread; null outside one.
thread_local c10d::ProcessGroup* t_context_group = nullptr;

}  // namespace

c10d::ProcessGroup* set_context_group(c10d::ProcessGroup* group) {
  return std::exchange(t_context_group, group);
}

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

}  // namespace parallel

torch::Tensor scaled_dot_product_attention(const torch::Tensor& query, const torch::Tensor& key,
                                           const torch::Tensor& value,
                                           const std::optional<torch::Tensor>& attn_mask,
                                           double dropout_p, bool is_causal,
                                           std::optional<double> scale, bool enable_gqa) {
  if (parallel::t_context_group == nullptr) {
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
  return parallel::ring_attention(query, k, v, *parallel::t_context_group, is_causal, scale);
}

}  // namespace accel
