// Ring attention: see ring_attention.h.
//
// Each process holds two chunks of queries and, at ring step s, the two chunks of keys and values
// of process r - s. A (query chunk, key chunk) pair is attended in full when the key chunk comes
// earlier in the sequence, causally when it is the same chunk, and not at all when it comes
// later (under is_causal; every pair in full otherwise). Each block's output and log-sum-exp are
// merged into the running ones: out = sum_b exp(lse_b - lse) out_b, lse = log sum_b exp(lse_b).
// Backward keeps no scores: each block's gradients follow from the merged output and log-sum-exp
// (softmax probabilities are exp(s - lse)), dQ stays home, and dK/dV travel with their block
// until they come back to its owner. Each block runs through the kernel
// scaled_dot_product_attention would pick that returns its log-sum-exp (FlashAttention or the
// memory-efficient one on CUDA, ATen's flash kernel on the CPU), so a block's memory is linear in
// its length; the exchange with the two neighbours is one grouped call on NCCL (ring_exchange.h).

#include "ring_attention.h"

#include "ring_blocks.h"
#include "ring_exchange.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace accel {
namespace parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

enum class Pair { full, causal, skip };

/// How query chunk `q` attends to key chunk `k` (global chunk indices).
Pair pair_of(int64_t q, int64_t k, bool is_causal) {
  if (!is_causal || k < q) return Pair::full;
  return k == q ? Pair::causal : Pair::skip;
}

/// The global chunk indices a process of rank `r` in a ring of `cp` holds.
std::array<int64_t, 2> chunks_of(int64_t r, int64_t cp) { return {r, 2 * cp - 1 - r}; }

constexpr int kForwardTag = 0x7a10, kBackwardTag = 0x7a20, kGradientTag = 0x7a30;

c10d::ProcessGroup& ring_group_of(AutogradContext* ctx) {
  return *reinterpret_cast<c10d::ProcessGroup*>(
      static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, int64_t group_address, bool is_causal,
                            double scale) {
    auto& group = *reinterpret_cast<c10d::ProcessGroup*>(static_cast<intptr_t>(group_address));
    const int64_t cp = group.getSize(), r = group.getRank(), c = q.size(2) / 2;
    const auto mine = chunks_of(r, cp);
    const auto kernel =
        kernel_for(q.narrow(2, 0, c), k.narrow(2, 0, c), v.narrow(2, 0, c), is_causal, scale);
    const bool grouped = groups_point_to_point(group, q.device().type());
    std::array<at::Tensor, 2> out, lse;
    // K and V travel as one buffer; backward takes this process's own again from the saved one
    // (saving it, not k and v, keeps one copy of them).
    const at::Tensor own_kv = at::stack({k, v});
    at::Tensor kv = own_kv;
    for (int64_t s = 0; s < cp; ++s) {
      const auto theirs = chunks_of((r - s + cp) % cp, cp);
      std::optional<RingTransfer> transfer;
      if (s + 1 < cp) {
        transfer.emplace(group, kv, at::empty_like(kv), kForwardTag + static_cast<int>(s), grouped);
      }
      for (int a = 0; a < 2; ++a) {
        for (int b = 0; b < 2; ++b) {
          const Pair pair = pair_of(mine[a], theirs[b], is_causal);
          if (pair == Pair::skip) continue;
          auto [o, l] = block_forward(kernel, q.narrow(2, a * c, c), kv[0].narrow(2, b * c, c),
                                      kv[1].narrow(2, b * c, c), pair == Pair::causal, scale);
          merge(out[a], lse[a], o, l);
        }
      }
      if (transfer) kv = transfer->wait();
    }
    auto output = at::cat({out[0], out[1]}, 2).to(q.scalar_type());
    auto logsumexp = at::cat({lse[0], lse[1]}, 2);
    ctx->save_for_backward({q, own_kv, output, logsumexp});
    ctx->saved_data["group"] = group_address;
    ctx->saved_data["causal"] = is_causal;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["kernel"] = static_cast<int64_t>(kernel);
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &own_kv = saved[1], &out = saved[2], &lse = saved[3];
    auto& group = ring_group_of(ctx);
    const bool is_causal = ctx->saved_data["causal"].toBool();
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto kernel = static_cast<BlockKernel>(ctx->saved_data["kernel"].toInt());
    const bool grouped = groups_point_to_point(group, q.device().type());
    const int64_t cp = group.getSize(), r = group.getRank(), c = q.size(2) / 2;
    const auto mine = chunks_of(r, cp);
    const auto dout = grads[0].contiguous();
    auto dq = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
    at::Tensor kv = own_kv;
    at::Tensor dkv = at::zeros(kv.sizes(), kv.options().dtype(at::kFloat));
    for (int64_t s = 0; s < cp; ++s) {
      const auto theirs = chunks_of((r - s + cp) % cp, cp);
      std::optional<RingTransfer> next_kv;
      if (s + 1 < cp) {
        next_kv.emplace(group, kv, at::empty_like(kv), kBackwardTag + static_cast<int>(s), grouped);
      }
      for (int a = 0; a < 2; ++a) {
        for (int b = 0; b < 2; ++b) {
          const Pair pair = pair_of(mine[a], theirs[b], is_causal);
          if (pair == Pair::skip) continue;
          auto [dq_ab, dk_ab, dv_ab] =
              block_backward(kernel, dout.narrow(2, a * c, c).contiguous(), q.narrow(2, a * c, c),
                             kv[0].narrow(2, b * c, c), kv[1].narrow(2, b * c, c),
                             out.narrow(2, a * c, c).contiguous(),
                             lse.narrow(2, a * c, c).contiguous(), pair == Pair::causal, scale);
          dq.narrow(2, a * c, c).add_(dq_ab);
          dkv[0].narrow(2, b * c, c).add_(dk_ab);
          dkv[1].narrow(2, b * c, c).add_(dv_ab);
        }
      }
      // The block's dK/dV go on with it; after the last step, one more hop takes them home.
      dkv =
          RingTransfer(group, dkv, at::empty_like(dkv), kGradientTag + static_cast<int>(s), grouped)
              .wait();
      if (next_kv) kv = next_kv->wait();
    }
    return {dq.to(q.scalar_type()),
            dkv[0].to(own_kv.scalar_type()),
            dkv[1].to(own_kv.scalar_type()),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

torch::Tensor ring_attention(const torch::Tensor& query, const torch::Tensor& key,
                             const torch::Tensor& value, c10d::ProcessGroup& group, bool is_causal,
                             std::optional<double> scale) {
  const double resolved = scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
  return RingAttention::apply(query.contiguous(), key.contiguous(), value.contiguous(),
                              static_cast<int64_t>(reinterpret_cast<intptr_t>(&group)), is_causal,
                              resolved);
}

}  // namespace parallel
}  // namespace accel
