#include "uneven_inputs_join.h"

#include "distributed/collectives.h"

#include <accel/operations.h>

#include <c10/util/Exception.h>

#include <algorithm>

namespace accel {
namespace core {

void UnevenInputsJoin::begin(const std::vector<const torch::nn::Module*>& models,
                             std::optional<bool> even_batches,
                             std::optional<ShardingStrategy> sharded_by) {
  TORCH_CHECK(!open(), "accel: join_uneven_inputs scopes do not nest");
  TORCH_CHECK(!sharded_by, "accel: join_uneven_inputs works with data-parallel models (NO_SHARD); ",
              "under ", *sharded_by,
              " the optimizer's collectives would wait for the processes that ran out");
  for (const auto* model : models) {
    TORCH_CHECK(models_.contains(model),
                "accel: join_uneven_inputs was given a model that was not prepared");
  }
  TORCH_CHECK(!models.empty(), "accel: join_uneven_inputs needs the prepared models it joins");
  models_joined_ = models;
  backwards_ = 0;
  loaders_.override_even_batches(even_batches);
}

void UnevenInputsJoin::count_backward(const std::vector<PreparedModel*>& syncing,
                                      c10d::ProcessGroup& host_group) {
  const bool joined = std::any_of(syncing.begin(), syncing.end(), [&](PreparedModel* m) {
    return std::count(models_joined_.begin(), models_joined_.end(), m->module) > 0;
  });
  if (!joined) return;
  auto still_training = torch::ones({1}, torch::kInt64);
  distributed::all_reduce(host_group, still_training, Reduction::Sum);
  ++backwards_;
}

void UnevenInputsJoin::end(const std::vector<const torch::nn::Module*>& models,
                           c10d::ProcessGroup* host_group) {
  loaders_.override_even_batches(std::nullopt);
  models_joined_.clear();
  if (host_group == nullptr) return;
  // Each round: how many processes are still training (each counts itself in backward()). While
  // any is, shadow the all-reduces of its backward; when none is, every process leaves together.
  for (;;) {
    auto still_training = torch::zeros({1}, torch::kInt64);
    distributed::all_reduce(*host_group, still_training, Reduction::Sum);
    if (still_training.item<int64_t>() == 0) break;
    models_.shadow_backward(models);
  }
  // The processes that finished early skipped their last optimizer steps. As DDP's Join, every
  // process continues from the model of the one that trained longest (the highest rank among
  // equals).
  const int64_t processes = host_group->getSize();
  auto last = torch::tensor({backwards_ * processes + host_group->getRank()});
  distributed::all_reduce(*host_group, last, Reduction::Max);
  models_.broadcast_from(models, last.item<int64_t>() % processes);
}

}  // namespace core
}  // namespace accel
