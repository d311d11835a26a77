// A ring attention block's kernels and the merge of blocks: see ring_blocks.h.

#include "ring_blocks.h"

#include <ATen/SDPBackend.h>

#include <limits>

namespace accel {
namespace parallel {
namespace {

/// The memory-efficient kernel keeps its log-sum-exp padded to a multiple of 32 queries.
constexpr int64_t kEfficientLseAlignment = 32;

/// A block's scores as the definition gives them (fp32), masked when `causal`.
at::Tensor block_scores(const at::Tensor& q, const at::Tensor& k, bool causal, double scale) {
  auto scores = at::matmul(q.to(at::kFloat), k.to(at::kFloat).transpose(-2, -1)) * scale;
  if (!causal) return scores;
  auto above = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).triu(1);
  return scores.masked_fill(above, -std::numeric_limits<float>::infinity());
}

}  // namespace

BlockKernel kernel_for(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       bool is_causal, double scale) {
  if (q.device().is_cpu()) return BlockKernel::cpu_flash;
  if (!q.is_cuda()) return BlockKernel::definition;
  const auto choice = static_cast<at::SDPBackend>(
      at::_fused_sdp_choice(q, k, v, std::nullopt, 0.0, is_causal, scale));
  const bool half = q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16;
  if (choice == at::SDPBackend::flash_attention ||
      (choice == at::SDPBackend::cudnn_attention && half))
    return BlockKernel::flash;
  if (choice == at::SDPBackend::efficient_attention) return BlockKernel::efficient;
  return BlockKernel::definition;
}

std::pair<at::Tensor, at::Tensor> block_forward(BlockKernel kernel, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v,
                                                bool causal, double scale) {
  switch (kernel) {
    case BlockKernel::cpu_flash: {
      auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal,
                                                                        std::nullopt, scale);
      return {out.to(at::kFloat), lse.to(at::kFloat)};
    }
    case BlockKernel::flash: {
      auto result = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, causal, false, scale);
      return {std::get<0>(result).to(at::kFloat), std::get<1>(result)};
    }
    case BlockKernel::efficient: {
      auto result = at::_scaled_dot_product_efficient_attention(q, k, v, std::nullopt, true, 0.0,
                                                                causal, scale);
      return {std::get<0>(result).to(at::kFloat), std::get<1>(result).narrow(-1, 0, q.size(-2))};
    }
    case BlockKernel::definition:
      break;
  }
  auto scores = block_scores(q, k, causal, scale);
  auto lse = at::logsumexp(scores, -1);
  return {at::matmul(at::exp(scores - lse.unsqueeze(-1)), v.to(at::kFloat)), lse};
}

std::array<at::Tensor, 3> block_backward(BlockKernel kernel, const at::Tensor& dout,
                                         const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& out,
                                         const at::Tensor& lse, bool causal, double scale) {
  switch (kernel) {
    case BlockKernel::cpu_flash: {
      auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          dout, q, k, v, out, lse, 0.0, causal, std::nullopt, scale);
      return {dq.to(at::kFloat), dk.to(at::kFloat), dv.to(at::kFloat)};
    }
    case BlockKernel::flash: {
      // No dropout: the random state is never read.
      const auto rng_state = at::zeros({2}, q.options().dtype(at::kLong));
      auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_backward(
          dout, q, k, v, out, lse, at::Tensor(), at::Tensor(), q.size(-2), k.size(-2), 0.0, causal,
          rng_state, at::Tensor(), scale);
      return {dq.to(at::kFloat), dk.to(at::kFloat), dv.to(at::kFloat)};
    }
    case BlockKernel::efficient: {
      const int64_t queries = q.size(-2);
      const int64_t padded =
          (queries + kEfficientLseAlignment - 1) / kEfficientLseAlignment * kEfficientLseAlignment;
      const auto padded_lse = at::constant_pad_nd(lse, {0, padded - queries}, 0.0);
      const auto seed = at::zeros({}, q.options().dtype(at::kLong));
      auto [dq, dk, dv, dbias] = at::_scaled_dot_product_efficient_attention_backward(
          dout, q, k, v, at::Tensor(), out, padded_lse, seed, seed, 0.0, {true, true, true, false},
          causal, scale);
      return {dq.to(at::kFloat), dk.to(at::kFloat), dv.to(at::kFloat)};
    }
    case BlockKernel::definition:
      break;
  }
  const auto qf = q.to(at::kFloat), kf = k.to(at::kFloat), vf = v.to(at::kFloat);
  const auto doutf = dout.to(at::kFloat);
  const auto p = at::exp(block_scores(q, k, causal, scale) - lse.unsqueeze(-1));
  const auto dp = at::matmul(doutf, vf.transpose(-2, -1));
  const auto delta = (doutf * out.to(at::kFloat)).sum(-1, /*keepdim=*/true);
  const auto ds = p * (dp - delta);
  return {at::matmul(ds, kf) * scale, at::matmul(ds.transpose(-2, -1), qf) * scale,
          at::matmul(p.transpose(-2, -1), doutf)};
}

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

}  // namespace parallel
}  // namespace accel
