// Ring attention: see ring_attention.h.
//
// Each process holds two chunks of queries and, at ring step s, the two chunks of keys and values
// of process r - s. A (query chunk, key chunk) pair is attended in full when the key chunk comes
// earlier in the sequence, causally when it is the same chunk, and not at all when it comes
// later (under is_causal; every pair in full otherwise). Each block's output and log-sum-exp are
// merged into the running ones: out = sum_b exp(lse_b - lse) out_b, lse = log sum_b exp(lse_b).
// Backward recomputes nothing: each block's gradients follow from the merged output and
// log-sum-exp (softmax probabilities are exp(s - lse)), dQ stays home, and dK/dV travel with
// their block until they come back to its owner.

#include "ring_attention.h"

#include "traffic.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
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

/// One block's output and log-sum-exp (fp32).
std::pair<at::Tensor, at::Tensor> block_forward(const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, bool causal, double scale) {
  if (q.device().is_cpu()) {
    auto [out, lse] =
        at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, std::nullopt, scale);
    return {out.to(at::kFloat), lse.to(at::kFloat)};
  }
  // Elsewhere, the same quantities from the definition (fp32).
  auto scores = at::matmul(q.to(at::kFloat), k.to(at::kFloat).transpose(-2, -1)) * scale;
  if (causal) {
    auto above = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(above, -std::numeric_limits<float>::infinity());
  }
  auto lse = at::logsumexp(scores, -1);
  return {at::matmul(at::exp(scores - lse.unsqueeze(-1)), v.to(at::kFloat)), lse};
}

/// One block's dQ, dK, dV given the merged output and log-sum-exp of its queries.
std::array<at::Tensor, 3> block_backward(const at::Tensor& dout, const at::Tensor& q,
                                         const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& out, const at::Tensor& lse, bool causal,
                                         double scale) {
  if (q.device().is_cpu()) {
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        dout.contiguous(), q, k, v, out.contiguous(), lse.contiguous(), 0.0, causal, std::nullopt,
        scale);
    return {dq.to(at::kFloat), dk.to(at::kFloat), dv.to(at::kFloat)};
  }
  const auto qf = q.to(at::kFloat), kf = k.to(at::kFloat), vf = v.to(at::kFloat);
  const auto doutf = dout.to(at::kFloat);
  auto scores = at::matmul(qf, kf.transpose(-2, -1)) * scale;
  if (causal) {
    auto above = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(above, -std::numeric_limits<float>::infinity());
  }
  const auto p = at::exp(scores - lse.unsqueeze(-1));
  const auto dp = at::matmul(doutf, vf.transpose(-2, -1));
  const auto delta = (doutf * out.to(at::kFloat)).sum(-1, /*keepdim=*/true);
  const auto ds = p * (dp - delta);
  return {at::matmul(ds, kf) * scale, at::matmul(ds.transpose(-2, -1), qf) * scale,
          at::matmul(p.transpose(-2, -1), doutf)};
}

/// Merges a block's (out, lse) into the running ones (undefined before the first block).
void merge(at::Tensor& out, at::Tensor& lse, const at::Tensor& block_out,
           const at::Tensor& block_lse) {
  if (!out.defined()) {
    out = block_out;
    lse = block_lse;
    return;
  }
  auto merged = at::logaddexp(lse, block_lse);
  out = out * at::exp(lse - merged).unsqueeze(-1) +
        block_out * at::exp(block_lse - merged).unsqueeze(-1);
  lse = merged;
}

/// Sends `outgoing` to the next process of the ring and receives the previous one's into
/// `incoming`; wait() completes both.
class RingTransfer {
 public:
  RingTransfer(c10d::ProcessGroup& group, at::Tensor outgoing, at::Tensor incoming, int tag)
      : outgoing_{std::move(outgoing)}, incoming_{std::move(incoming)} {
    const int cp = group.getSize(), r = group.getRank();
    // Both are asynchronous: the block's compute runs while they are under way.
    parallel_traffic().cp_bytes += static_cast<int64_t>(outgoing_[0].nbytes());
    send_ = group.send(outgoing_, (r + 1) % cp, tag);
    recv_ = group.recv(incoming_, (r - 1 + cp) % cp, tag);
  }
  at::Tensor wait() {
    send_->wait();
    recv_->wait();
    return incoming_[0];
  }

 private:
  std::vector<at::Tensor> outgoing_, incoming_;
  c10::intrusive_ptr<c10d::Work> send_, recv_;
};

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
    std::array<at::Tensor, 2> out, lse;
    // K and V travel as one buffer; backward takes this process's own again from the saved one
    // (saving it, not k and v, keeps one copy of them).
    const at::Tensor own_kv = at::stack({k, v});
    at::Tensor kv = own_kv;
    for (int64_t s = 0; s < cp; ++s) {
      const auto theirs = chunks_of((r - s + cp) % cp, cp);
      std::optional<RingTransfer> transfer;
      if (s + 1 < cp) {
        transfer.emplace(group, kv, at::empty_like(kv), kForwardTag + static_cast<int>(s));
      }
      for (int a = 0; a < 2; ++a) {
        for (int b = 0; b < 2; ++b) {
          const Pair pair = pair_of(mine[a], theirs[b], is_causal);
          if (pair == Pair::skip) continue;
          auto [o, l] = block_forward(q.narrow(2, a * c, c), kv[0].narrow(2, b * c, c),
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
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &own_kv = saved[1], &out = saved[2], &lse = saved[3];
    auto& group = ring_group_of(ctx);
    const bool is_causal = ctx->saved_data["causal"].toBool();
    const double scale = ctx->saved_data["scale"].toDouble();
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
        next_kv.emplace(group, kv, at::empty_like(kv), kBackwardTag + static_cast<int>(s));
      }
      for (int a = 0; a < 2; ++a) {
        for (int b = 0; b < 2; ++b) {
          const Pair pair = pair_of(mine[a], theirs[b], is_causal);
          if (pair == Pair::skip) continue;
          auto [dq_ab, dk_ab, dv_ab] = block_backward(
              dout.narrow(2, a * c, c), q.narrow(2, a * c, c), kv[0].narrow(2, b * c, c),
              kv[1].narrow(2, b * c, c), out.narrow(2, a * c, c), lse.narrow(2, a * c, c),
              pair == Pair::causal, scale);
          dq.narrow(2, a * c, c).add_(dq_ab);
          dkv[0].narrow(2, b * c, c).add_(dk_ab);
          dkv[1].narrow(2, b * c, c).add_(dv_ab);
        }
      }
      // The block's dK/dV go on with it; after the last step, one more hop takes them home.
      dkv =
          RingTransfer(group, dkv, at::empty_like(dkv), kGradientTag + static_cast<int>(s)).wait();
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
