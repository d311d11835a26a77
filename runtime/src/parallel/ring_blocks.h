#pragma once

// Ring attention's blocks (ring_attention.cpp): one (query chunk, key chunk) pair's attention
// through a kernel that returns its log-sum-exp, its gradients given the whole attention's
// output and log-sum-exp, and the merge of blocks into the running output.

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <utility>

namespace accel {
namespace parallel {

/// The kernel each block runs through, chosen once per call (backward runs the same).
enum class BlockKernel : int64_t {
  cpu_flash,   ///< ATen's flash attention for the CPU
  flash,       ///< FlashAttention (CUDA, fp16/bf16)
  efficient,   ///< the memory-efficient kernel (CUDA, any float dtype)
  definition,  ///< scores from the definition, in fp32 (for what no kernel takes)
};

/// As scaled_dot_product_attention would choose for a block of these inputs (its own choice,
/// honouring the program's backend switches), among the kernels that return the log-sum-exp
/// ring attention merges with; cuDNN's, where torch prefers it, gives way to FlashAttention for
/// the dtypes both take.
BlockKernel kernel_for(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       bool is_causal, double scale);

/// One block's output and log-sum-exp, both fp32 (the log-sum-exp [batch, heads, queries]), of
/// [batch, heads, sequence, head_dim] inputs; `causal`: top-left aligned, as the kernels are.
std::pair<at::Tensor, at::Tensor> block_forward(BlockKernel kernel, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v,
                                                bool causal, double scale);

/// One block's dQ, dK, dV (fp32) given the merged output (in the queries' dtype) and log-sum-exp
/// (fp32) of its queries: each kernel's backward recomputes the block's probabilities as
/// exp(scores - lse) and its correction as rowsum(dout * out), which with the merged ones are
/// the block's share of the whole attention's gradients.
std::array<at::Tensor, 3> block_backward(BlockKernel kernel, const at::Tensor& dout,
                                         const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& out,
                                         const at::Tensor& lse, bool causal, double scale);

/// Merges a block's (out, lse) into the running ones (undefined before the first block):
/// out = sum_b exp(lse_b - lse) out_b, lse = log sum_b exp(lse_b).
void merge(at::Tensor& out, at::Tensor& lse, const at::Tensor& block_out,
           const at::Tensor& block_lse);

}  // namespace parallel
}  // namespace accel
