// Linear's and Embedding's operators on tensor-parallel slices: each adds its style's
// collectives around the operator, which runs below the key. See tensor_parallel.h.
//
// LinearImpl::forward runs `addmm(bias, input, weight.t())` on a 2-D input with a bias and
// `input.matmul(weight.t())`, then `output += bias`, otherwise; a program may also call
// torch::linear. The weight's t() is a view and keeps the key, so each form arrives here with
// the slice it was taken from. Backward's formulas run mm on the saved views, which passes.

#include "tp_kernels.h"

#include "tensor_parallel.h"
#include "tp_collectives.h"
#include "util/collective_label.h"
#include "util/dispatch_registration.h"
#include "util/torch_compat.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <utility>

namespace accel {
namespace parallel {
namespace {

using Plain = c10::impl::ExcludeDispatchKeyGuard;

/// The slice behind a Linear's weight (or its t()), refusing one split for another operator.
const TpSlice* linear_slice(const at::Tensor& weight, const char* op) {
  const TpSlice* slice = tp_slice_of(weight);
  TORCH_CHECK(slice == nullptr || (slice->style != TpStyle::embedding_rowwise &&
                                   slice->style != TpStyle::sequence_parallel),
              "accel: ", op, " uses '", slice == nullptr ? "" : slice->name,
              "', which the tensor-parallel plan plans as an embedding (",
              slice == nullptr ? "" : to_string(slice->style),
              "); a weight tied to a Linear cannot be planned that way: plan the embedding "
              "'replicate', or untie the weights");
  return slice;
}

bool colwise(const TpSlice& s) {
  return s.style == TpStyle::colwise || s.style == TpStyle::colwise_gather_output;
}

/// The last input a colwise layer took through copy_to_group, and what that gave: q, k and v
/// read the same input, and taking it through one copy_to_group sums its three gradients before
/// the one all-reduce (Megatron's count, as for a fused qkv layer) instead of after three. The
/// input is held weakly; what copy_to_group gave (a view of it) until the next colwise layer
/// takes another input or backward starts (release_shared_input).
struct SharedInput {
  c10::weak_intrusive_ptr<c10::TensorImpl> input{c10::intrusive_ptr<c10::TensorImpl>()};
  at::Tensor copied;
  uint32_t version = 0;
  bool grad_mode = false;
  const c10d::ProcessGroup* group = nullptr;
};
thread_local SharedInput t_shared_input;

/// The sequence dimension of a sequence-parallel region's activations ([batch, sequence, ...]).
constexpr int64_t kSequenceDim = 1;

void check_sequence_layout(const TpSlice& s, const at::Tensor& activation, const char* op) {
  TORCH_CHECK(activation.dim() >= 3, "accel: ", op, " of '", s.name,
              "' in a sequence-parallel plan takes [batch, sequence, features] activations; got ",
              activation.sizes());
}

/// copy_to_group(input) (or, in a sequence-parallel plan, its gather along the sequence),
/// shared with the previous colwise layer that took the same input (the same tensor, unchanged
/// since, in the same grad mode and group).
at::Tensor copied_input(const at::Tensor& input, const GroupPtr& group, bool sequence_parallel) {
  auto& last = t_shared_input;
  const bool grad_mode = at::GradMode::is_enabled();
  if (auto seen = last.input.lock(); seen && seen.get() == input.unsafeGetTensorImpl() &&
                                     last.copied.defined() && last.version == input._version() &&
                                     last.grad_mode == grad_mode && last.group == group.get()) {
    return last.copied;
  }
  at::Tensor copied = sequence_parallel ? gather_dim_for_group(input, group, kSequenceDim)
                                        : copy_to_group(input, group);
  last.input = c10::weak_intrusive_ptr<c10::TensorImpl>(input.getIntrusivePtr());
  last.copied = copied;
  last.version = input._version();
  last.grad_mode = grad_mode;
  last.group = group.get();
  return copied;
}

/// The input a slice's product takes: a colwise layer's input is used whole by every process
/// (its gradient summed over the group); a rowwise_split_input layer keeps its own slice.
at::Tensor layer_input(const TpSlice& s, const at::Tensor& input) {
  if (colwise(s)) {
    if (s.sequence_parallel) check_sequence_layout(s, input, "the input");
    return copied_input(input, s.group, s.sequence_parallel);
  }
  if (s.style == TpStyle::rowwise_split_input) return split_last_dim(input, s.group);
  return input;
}

/// The product's output as the style hands it on: partial sums all-reduced (rowwise), slices
/// gathered (colwise_gather_output), or left sharded (colwise).
at::Tensor layer_output(const TpSlice& s, const at::Tensor& product) {
  if (s.style == TpStyle::colwise_gather_output) return gather_last_dim(product, s.group);
  if (colwise(s)) return product;
  if (s.sequence_parallel) return reduce_scatter_dim(product, s.group, kSequenceDim);
  return reduce_from_group(product, s.group);
}

/// Names a split layer's collectives for the flight recorder ("tensor-parallel > rowwise").
struct LayerLabel {
  explicit LayerLabel(const TpSlice& s) : style(to_string(s.style)) {}
  util::CollectiveLabel layer{"tensor-parallel"};
  util::CollectiveLabel style;
};

at::Tensor tp_linear(const at::Tensor& input, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias) {
  Plain plain(util::kTensorParallelDispatchKey);
  const TpSlice* s = linear_slice(weight, "linear");
  if (s == nullptr) return at::linear(input, weight, bias);
  LayerLabel label(*s);
  // A sliced bias (colwise) goes with the product; a whole one after the collective.
  const bool bias_sliced =
      bias && bias->defined() && colwise(*s) && s->style != TpStyle::colwise_gather_output;
  auto out = layer_output(
      *s, at::linear(layer_input(*s, input), weight, bias_sliced ? bias : std::nullopt));
  if (bias && bias->defined() && !bias_sliced) out = out + *bias;
  return out;
}

at::Tensor tp_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                    const c10::Scalar& beta, const c10::Scalar& alpha) {
  Plain plain(util::kTensorParallelDispatchKey);
  const TpSlice* s = linear_slice(mat2, "addmm");
  if (s == nullptr) return at::addmm(self, mat1, mat2, beta, alpha);
  LayerLabel label(*s);
  if (s->sequence_parallel) check_sequence_layout(*s, mat1, "a 2-D input");
  if (s->style == TpStyle::colwise)
    return at::addmm(self, layer_input(*s, mat1), mat2, beta, alpha);
  auto product = at::mm(layer_input(*s, mat1), mat2);
  if (!alpha.equal(1)) product = product * alpha;
  return at::add(layer_output(*s, product), self, beta);
}

at::Tensor tp_matmul(const at::Tensor& self, const at::Tensor& other) {
  Plain plain(util::kTensorParallelDispatchKey);
  const TpSlice* s = linear_slice(other, "matmul");
  if (s == nullptr) return at::matmul(self, other);
  LayerLabel label(*s);
  return layer_output(*s, at::matmul(layer_input(*s, self), other));
}

at::Tensor tp_embedding(const at::Tensor& weight, const at::Tensor& indices,
                        c10::SymInt padding_idx, bool scale_grad_by_freq, bool sparse) {
  Plain plain(util::kTensorParallelDispatchKey);
  const TpSlice* s = tp_slice_of(weight);
  std::optional<LayerLabel> label;
  if (s != nullptr) label.emplace(*s);
  if (s != nullptr && s->style == TpStyle::sequence_parallel) {
    // A whole table whose lookups enter a sequence-parallel region: each keeps its shard.
    check_sequence_layout(*s, indices.unsqueeze(-1), "the lookup");
    return split_dim(at::embedding_symint(weight, indices, padding_idx, scale_grad_by_freq, sparse),
                     s->group, kSequenceDim);
  }
  if (s == nullptr || s->style != TpStyle::embedding_rowwise) {
    return at::embedding_symint(weight, indices, padding_idx, scale_grad_by_freq, sparse);
  }
  // Vocabulary-parallel lookup: each process looks up the ids in its rows, zeros the others,
  // and the lookups are summed over the group (one process holds each id's row).
  const int64_t rows = weight.size(0), first = s->group->getRank() * rows;
  const auto outside = indices.lt(first).logical_or(indices.ge(first + rows));
  const auto local = (indices - first).masked_fill(outside, 0);
  const int64_t padding = padding_idx.expect_int();
  const int64_t local_padding = padding >= first && padding < first + rows ? padding - first : -1;
  auto found = at::embedding(weight, local, local_padding, scale_grad_by_freq, sparse);
  found = found.masked_fill(outside.unsqueeze(-1), 0);
  if (s->sequence_parallel) return reduce_scatter_dim(found, s->group, kSequenceDim);
  return reduce_from_group(found, s->group);
}

}  // namespace

void release_shared_input() { t_shared_input = SharedInput{}; }

void register_tp_kernels() {
  static const bool registered = [] {
    util::register_borrowed_key(util::kTensorParallelDispatchKey, "tensor parallelism",
                                torch::CppFunction::makeFallthrough(), [](torch::Library& aten) {
                                  aten.impl("linear", TORCH_FN(tp_linear));
                                  aten.impl("addmm", TORCH_FN(tp_addmm));
                                  aten.impl("matmul", TORCH_FN(tp_matmul));
                                  aten.impl("embedding", TORCH_FN(tp_embedding));
                                });
    return true;
  }();
  (void)registered;
}

}  // namespace parallel
}  // namespace accel
