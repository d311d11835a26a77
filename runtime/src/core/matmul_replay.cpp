// A checkpointed block's matmuls recorded in forward and replayed in the recompute: see
// matmul_replay.h.
//
// A replayed matmul is an autograd node of its own whose backward is the operator's formula in
// PyTorch's FunctionsManual (mm_mat1_backward, mm_mat2_backward; addmm's and bmm's entries of
// derivatives.yaml), products in the same layouts, so the gradients are the plain run's bit for
// bit. The key sits above autocast: a replay casts the operands as autocast would (its cache of
// weight casts included), so the graph holds the casts the plain run's holds.

#include "matmul_replay.h"

#include "precision/mode_key.h"
#include "util/torch_compat.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include <utility>

namespace accel {
namespace core {
namespace {

thread_local MatmulRecord* t_record = nullptr;  // the record or replay open on this thread

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor maybe_multiply(const at::Tensor& tensor, const c10::Scalar& factor) {
  return factor.equal(1) ? tensor : tensor * factor;
}

bool column_major(const at::Tensor& matrix) {
  return matrix.stride(0) == 1 && matrix.stride(1) == matrix.size(0);
}

/// PyTorch's mm_mat1_backward and mm_mat2_backward, for strided real matrices.
at::Tensor mat1_gradient(const at::Tensor& grad, const at::Tensor& mat1, const at::Tensor& mat2,
                         const c10::Scalar& alpha) {
  if (column_major(mat1)) return maybe_multiply(mat2.mm(grad.t()).t(), alpha);
  return maybe_multiply(grad.mm(mat2.t()), alpha);
}
at::Tensor mat2_gradient(const at::Tensor& grad, const at::Tensor& mat1, const at::Tensor& mat2,
                         const c10::Scalar& alpha) {
  if (column_major(mat2)) return maybe_multiply(grad.t().mm(mat1).t(), alpha);
  return maybe_multiply(mat1.t().mm(grad), alpha);
}

/// The gradients of mat1 and mat2 in `product` (mm, addmm's, or batched: bmm) given the
/// output's.
std::pair<at::Tensor, at::Tensor> operand_gradients(AutogradContext* ctx, const at::Tensor& grad,
                                                    size_t first_operand) {
  const auto saved = ctx->get_saved_variables();
  const auto& mat1 = saved[0];
  const auto& mat2 = saved[1];
  const auto alpha = ctx->saved_data["alpha"].toScalar();
  const bool batched = ctx->saved_data["batched"].toBool();
  at::Tensor mat1_grad, mat2_grad;
  if (ctx->needs_input_grad(first_operand)) {
    mat1_grad = batched ? grad.bmm(mat2.transpose(1, 2)) : mat1_gradient(grad, mat1, mat2, alpha);
  }
  if (ctx->needs_input_grad(first_operand + 1)) {
    mat2_grad = batched ? mat1.transpose(1, 2).bmm(grad) : mat2_gradient(grad, mat1, mat2, alpha);
  }
  return {mat1_grad, mat2_grad};
}

/// mm(mat1, mat2) or bmm whose output was recorded: forward hands the recorded output on,
/// backward is the operator's.
struct ReplayedProduct : public torch::autograd::Function<ReplayedProduct> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& mat1, const at::Tensor& mat2,
                            bool batched, std::vector<at::Tensor> recorded) {
    ctx->save_for_backward({mat1, mat2});
    ctx->saved_data["alpha"] = c10::Scalar(1);
    ctx->saved_data["batched"] = batched;
    return recorded.front();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto [mat1_grad, mat2_grad] = operand_gradients(ctx, grads[0], 0);
    return {mat1_grad, mat2_grad, at::Tensor(), at::Tensor()};
  }
};

/// addmm(self, mat1, mat2, beta, alpha) whose output was recorded.
struct ReplayedAddmm : public torch::autograd::Function<ReplayedAddmm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, const at::Tensor& mat1,
                            const at::Tensor& mat2, c10::Scalar beta, c10::Scalar alpha,
                            std::vector<at::Tensor> recorded) {
    (void)self;
    ctx->save_for_backward({mat1, mat2});
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["batched"] = false;
    return recorded.front();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The engine sums a broadcast self's gradient to its shape, as for addmm.
    at::Tensor self_grad;
    if (ctx->needs_input_grad(0)) {
      self_grad = maybe_multiply(grads[0], ctx->saved_data["beta"].toScalar());
    }
    auto [mat1_grad, mat2_grad] = operand_gradients(ctx, grads[0], 1);
    return {self_grad, mat1_grad, mat2_grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

/// `tensor` as autocast hands it to a lower-precision operator (mm, addmm, bmm) here.
at::Tensor autocast_operand(const at::Tensor& tensor) {
  if (!tensor.defined()) return tensor;
  const auto type = tensor.device().type();
  if (!util::autocast_enabled(type)) return tensor;
  return at::autocast::cached_cast(util::autocast_dtype(type), tensor, type);
}

/// The next recorded output, checked against the operator asking for it.
at::Tensor next_recorded(MatmulRecord& record, const char* op, at::IntArrayRef expected) {
  TORCH_CHECK(record.replayed < record.outputs.size(), "accel::checkpoint: the block computed ", op,
              " more often when run again in backward than in forward (", record.outputs.size(),
              " matmuls); with save_matmuls it must compute the same thing both times");
  at::Tensor recorded = std::move(record.outputs[record.replayed]);
  ++record.replayed;
  TORCH_CHECK(recorded.sizes() == expected, "accel::checkpoint: the block's matmul #",
              record.replayed, " (", op, ") gives ", expected, " when run again in backward and ",
              recorded.sizes(),
              " in forward; with save_matmuls it must compute the same thing both times");
  return recorded;
}

at::Tensor routed(const char* op, const at::Tensor& self, const at::Tensor& mat1,
                  const at::Tensor& mat2, const c10::Scalar& beta, const c10::Scalar& alpha,
                  bool batched, const precision::Compute& compute) {
  MatmulRecord* record = t_record;
  if (record == nullptr) return compute();
  if (precision::mode_on(precision::Mode::RecordMatmuls)) {
    // Below the key: a kernel that calls the operator again (autocast's, after its casts) is
    // not recorded twice.
    c10::impl::ExcludeDispatchKeyGuard once(util::kModeDispatchKey);
    record->outputs.push_back(compute());
    // The block gets a copy: what it does to it in place (LinearImpl adds a 3-D input's bias
    // with +=) must not reach the record.
    return record->outputs.back().clone();
  }
  const auto a = autocast_operand(mat1);
  const auto b = autocast_operand(mat2);
  const auto s = autocast_operand(self);  // undefined for mm and bmm
  std::vector<int64_t> expected = batched ? std::vector<int64_t>{a.size(0), a.size(1), b.size(2)}
                                          : std::vector<int64_t>{a.size(0), b.size(1)};
  auto recorded = next_recorded(*record, op, expected);
  const bool differentiable =
      at::GradMode::is_enabled() &&
      (a.requires_grad() || b.requires_grad() || (s.defined() && s.requires_grad()));
  if (!differentiable) return recorded;
  std::vector<at::Tensor> output{std::move(recorded)};
  if (s.defined()) return ReplayedAddmm::apply(s, a, b, beta, alpha, std::move(output));
  return ReplayedProduct::apply(a, b, batched, std::move(output));
}

at::Tensor routed_mm(const at::Tensor& self, const at::Tensor& mat2,
                     const precision::Compute& compute) {
  return routed("mm", at::Tensor(), self, mat2, 1, 1, false, compute);
}
at::Tensor routed_bmm(const at::Tensor& self, const at::Tensor& mat2,
                      const precision::Compute& compute) {
  return routed("bmm", at::Tensor(), self, mat2, 1, 1, true, compute);
}
at::Tensor routed_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                        const c10::Scalar& beta, const c10::Scalar& alpha,
                        const precision::Compute& compute) {
  return routed("addmm", self, mat1, mat2, beta, alpha, false, compute);
}

void use_routes() { precision::set_matmul_routes({&routed_mm, &routed_bmm, &routed_addmm}); }

}  // namespace

MatmulScope::MatmulScope(MatmulRecord& record, Kind kind) : previous_(t_record) {
  use_routes();
  t_record = &record;
  was_recording_ = precision::set_mode(precision::Mode::RecordMatmuls, kind == Kind::Record);
  was_replaying_ = precision::set_mode(precision::Mode::ReplayMatmuls, kind == Kind::Replay);
}

MatmulScope::~MatmulScope() {
  t_record = previous_;
  precision::set_mode(precision::Mode::RecordMatmuls, was_recording_);
  precision::set_mode(precision::Mode::ReplayMatmuls, was_replaying_);
}

}  // namespace core
}  // namespace accel
