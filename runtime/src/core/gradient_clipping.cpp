#include "gradient_clipping.h"

#include "distributed/collectives.h"
#include "parallel/tensor_parallel.h"

#include <accel/operations.h>

#include <cmath>
#include <utility>

namespace accel {
namespace core {

HeldGradients held_gradients(const std::vector<std::shared_ptr<sharding::OptimizerShards>>& shards,
                             const std::vector<torch::Tensor>& parameters) {
  HeldGradients held;
  std::vector<torch::Tensor> rest = parameters;
  for (const auto& optimizer_shards : shards) {
    std::vector<torch::Tensor> unheld;
    optimizer_shards->shard_gradients_of(rest, held.pieces, unheld);
    rest = std::move(unheld);
  }
  for (const auto& p : rest) {
    if (p.grad().defined()) held.whole.push_back(p.grad());
  }
  return held;
}

double local_grad_norm(const std::vector<torch::Tensor>& parameters, double norm_type,
                       const torch::Device& device, double scale) {
  // Each parameter's norm stays on the device; one transfer at the end, not one per parameter.
  std::vector<torch::Tensor> norms;
  for (const auto& p : parameters) {
    if (p.grad().defined()) {
      norms.push_back(torch::linalg_vector_norm(p.grad().detach(), norm_type).to(device));
    }
  }
  if (norms.empty()) return 0.0;
  return torch::linalg_vector_norm(torch::stack(norms), norm_type).item<double>() / scale;
}

double clip_split_grad_norm(const std::vector<std::shared_ptr<sharding::OptimizerShards>>& shards,
                            const std::vector<torch::Tensor>& parameters, double max_norm,
                            double norm_type, const SplitNormGroups& groups,
                            const torch::Device& device) {
  // The norm is the sum of every process's |g|^p (or the max of |g|, for p = inf) over the
  // parts of the gradients it holds, each part counted once over the mesh:
  // - a sharded strategy's pieces are combined over the processes the shards are cut among
  //   (under HYBRID_SHARD the replicas hold the same pieces); gradients no shard holds are alike
  //   on all of them, and counted by the first;
  // - a tensor-parallel slice is one process's part of a whole: its term is then summed over
  //   the tp group, while a parameter used whole is alike on every tp process, counted once;
  // - a pipeline's stages hold different parameters: both terms are summed over the pp group.
  std::vector<torch::Tensor> sliced_parameters, plain_parameters;
  for (const auto& p : parameters)
    (parallel::is_tensor_parallel_slice(p) ? sliced_parameters : plain_parameters).push_back(p);
  auto sliced = held_gradients(shards, sliced_parameters);
  auto plain = held_gradients(shards, plain_parameters);
  const bool infinity = std::isinf(norm_type);
  const bool counts_whole = groups.shard_group == nullptr || groups.shard_group->getRank() == 0;
  // terms[0]: the tensor-parallel slices' parts; terms[1]: the others'.
  auto terms = torch::zeros({2}, torch::dtype(torch::kFloat).device(device));
  auto add = [&](int64_t term, const std::vector<torch::Tensor>& grads) {
    for (const auto& grad : grads) {
      auto norm = torch::linalg_vector_norm(grad.detach(), norm_type).to(device).to(torch::kFloat);
      auto slot = terms.narrow(0, term, 1);
      if (infinity) {
        slot.copy_(torch::maximum(slot, norm.reshape({1})));
      } else {
        slot.add_(norm.pow(norm_type).reshape({1}));
      }
    }
  };
  add(0, sliced.pieces);
  add(1, plain.pieces);
  if (counts_whole) {
    add(0, sliced.whole);
    add(1, plain.whole);
  }
  const auto reduction = infinity ? Reduction::Max : Reduction::Sum;
  if (groups.shard_group != nullptr) distributed::all_reduce(*groups.shard_group, terms, reduction);
  if (groups.tp_group != nullptr) {
    auto slices = terms.narrow(0, 0, 1).clone();
    distributed::all_reduce(*groups.tp_group, slices, reduction);
    terms.narrow(0, 0, 1).copy_(slices);
  }
  // Each stage of a pipeline holds its own parameters: every term is summed over the stages.
  if (groups.pp_group != nullptr) distributed::all_reduce(*groups.pp_group, terms, reduction);
  const auto total = infinity ? terms.max() : terms.sum().pow(1.0 / norm_type);
  const auto coefficient = torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  torch::NoGradGuard no_grad;
  for (auto* parts : {&sliced.pieces, &sliced.whole, &plain.pieces, &plain.whole}) {
    for (auto& grad : *parts) grad.mul_(coefficient.to(grad.device()));
  }
  return total.item<double>();
}

}  // namespace core
}  // namespace accel
