// Accelerator::backward, in the steps a synchronising backward takes: the accumulation window's
// item count started, the loss scaled, the models and shards this loss reaches armed, autograd
// run, the gradients' synchronisation finished and checked, and a window of counted items
// divided by their count.

#include <accel/accelerator.h>

#include "accelerator_impl.h"
#include "checkpoint_graph.h"
#include "distributed/collectives.h"
#include "distributed/gradient_sync.h"
#include "parallel/tensor_parallel.h"
#include "util/collective_label.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

namespace accel {

using core::PreparedModel;

using Shards = std::vector<std::shared_ptr<sharding::OptimizerShards>>;

namespace core {

/// The parameters a loss reaches, found once (a walk of the graph) if some filter needs them.
/// Checkpoint blocks' parameters join when the block knows them (a CheckpointWrapper's); a block
/// that does not leaves the set partial.
class ReachedParameters {
 public:
  explicit ReachedParameters(const torch::Tensor& loss) : loss_(loss) {}

  const std::unordered_set<const c10::TensorImpl*>& get() {
    if (reached_) return *reached_;
    std::vector<torch::Tensor> in_blocks;
    reached_ = distributed::autograd_leaves(loss_, [&](const torch::autograd::Node& node) {
      auto block = core::checkpointed_parameters(node);
      if (!block) return;
      partial_ = partial_ || !block->known;
      in_blocks.insert(in_blocks.end(), block->parameters.begin(), block->parameters.end());
    });
    for (const auto& p : in_blocks) reached_->insert(p.unsafeGetTensorImpl());
    return *reached_;
  }
  /// Some checkpoint block did not say which parameters it holds (after get()).
  bool partial() const { return partial_; }

 private:
  torch::Tensor loss_;
  std::optional<std::unordered_set<const c10::TensorImpl*>> reached_;
  bool partial_ = false;
};

}  // namespace core

namespace {

/// backward(loss_sum, num_items)'s count of the window's items over every process, under way
/// while backward runs. The count's buffer outlives the collective also when backward throws.
class ItemCount {
 public:
  /// Starts the count of `items` when `counts` (this backward ends a window of counted items);
  /// `group`: the processes', null on one process.
  ItemCount(bool counts, int64_t items, c10d::ProcessGroup* group) {
    if (!counts) return;
    counted_ = torch::tensor({items}, torch::kInt64);
    if (group != nullptr) {
      std::vector<torch::Tensor> tensors{counted_};
      work_ = group->allreduce(tensors);
    }
  }
  ItemCount(const ItemCount&) = delete;
  ItemCount& operator=(const ItemCount&) = delete;
  ~ItemCount() {
    if (!work_) return;
    try {
      work_->wait();
    } catch (...) {  // the error that ended backward is the one to report
    }
  }

  /// What the window's gradients are multiplied by: the reduction averaged over the `processes`,
  /// and the window's mean is over its items. None when this backward ends no counted window.
  std::optional<double> factor(int64_t processes) {
    if (!counted_.defined()) return std::nullopt;
    if (work_) {
      work_->wait();
      work_.reset();
    }
    return static_cast<double>(processes) / static_cast<double>(counted_.item<int64_t>());
  }

 private:
  torch::Tensor counted_;
  c10::intrusive_ptr<c10d::Work> work_;
};

/// Also when backward throws: no gradient is left a bucket view (see finish_backward), and no
/// shard is left waiting for the rest of a backward.
struct FinishBackward {
  const std::vector<PreparedModel*>& models;
  const Shards& sharded;
  bool completed = false;
  ~FinishBackward() {
    for (auto* m : models) m->sync->finish_backward();
    if (completed) return;
    for (auto& shards : sharded) shards->finish_backward(false);
  }
};

/// The sharded optimizers that take this backward's gradients (those the loss reaches).
Shards shards_to_arm(const sharding::ShardingSetup& sharding, core::PreparedModels& models,
                     bool distributed, const std::vector<PreparedModel*>& syncing,
                     core::ReachedParameters& reached) {
  // One process that shards (CPU offload) has no synchronisers: its shards take the gradients
  // on every backward outside no_sync.
  const bool one_process_syncs = !distributed && sharding.sharded() && models.take_any_syncing();
  // Sharded optimizers whose parameters this backward reaches: ZeRO-2's send each unit's
  // gradients as backward finishes them.
  Shards armed;
  if (!syncing.empty() || one_process_syncs) armed = sharding.live();
  if (armed.size() > 1) {
    armed.erase(
        std::remove_if(armed.begin(), armed.end(),
                       [&](const auto& shards) { return !shards->holds_any(reached.get()); }),
        armed.end());
  }
  return armed;
}

/// After autograd: the shards' reductions, the unused-parameter verdict (returned as the error
/// to raise, or empty), and the buffers' broadcast when the graph is freed.
std::string finish_sync(const std::vector<PreparedModel*>& syncing, const Shards& sharded,
                        bool graph_freed) {
  // ZeRO-2 collects the units it sent; ZeRO-1 cuts its slices out of the all-reduced gradients.
  for (auto& shards : sharded) shards->finish_backward(true);
  // Which parameters no process used, and what is wrong: every process reaches the same verdict,
  // raised once the step's bookkeeping is done. (Without a reducer the verdict takes a
  // collective: after the units' reduce-scatters, which every process sends in one order.)
  std::string usage_error;
  std::vector<torch::Tensor> unused;
  for (auto* m : syncing) {
    auto verdict = m->sync->check_usage();
    if (usage_error.empty()) usage_error = std::move(verdict.error);
    unused.insert(unused.end(), verdict.unused.begin(), verdict.unused.end());
  }
  for (auto& shards : sharded) {
    shards->reduce_gradients();
    shards->leave_unstepped(unused);
  }
  // DistributedDataParallel broadcasts buffers before each forward. The forward has already run
  // here, and autograd may have saved the buffers (BatchNorm's running statistics): broadcasting
  // before this backward would change them under it. After it, every process starts its next
  // forward from rank 0's buffers, as under DDP. A retained graph may still need them as they are.
  if (graph_freed) {
    for (auto* m : syncing) m->sync->sync_buffers();
  }
  return usage_error;
}

}  // namespace

void Accelerator::backward(const torch::Tensor& loss_sum, int64_t num_items) {
  TORCH_CHECK(num_items > 0,
              "accel: backward(loss_sum, num_items) takes the number of items the "
              "loss sums over, and num_items is ",
              num_items, " (expected > 0)");
  impl_->window.hold_items(num_items);
  backward(loss_sum);
}

void Accelerator::backward(const torch::Tensor& loss, const torch::Tensor& gradient,
                           std::optional<bool> retain_graph, bool create_graph) {
  ACCEL_METHOD_LABEL("backward");
  // backward(loss_sum, num_items): the window's gradients are divided by its items, counted over
  // every micro-step and process, once they are summed.
  auto& window = impl_->window;
  const auto items = window.take_held_items();
  const bool ends_window = window.count_items(items, impl_->join.open());
  // Counted where gradients average: on a device mesh its data and cp processes (a tp group's
  // processes hold the same items, counted once), else every process.
  c10d::ProcessGroup* count_group = nullptr;
  if (impl_->distributed()) {
    count_group = impl_->mesh != nullptr ? impl_->gradient_group().get() : &impl_->host_group();
  }
  ItemCount count(items && ends_window, window.counted_items(), count_group);
  // Inside accumulate_until the program divides its loss itself, if it does; a sum over counted
  // items is divided by their count instead.
  const int64_t steps = window.loss_divisor(items.has_value());
  torch::Tensor scaled = steps > 1 ? loss / static_cast<double>(steps) : loss;
  if (auto* scaler = this->scaler()) scaled = scaler->scale(scaled);

  core::ReachedParameters reached(scaled);
  const auto syncing = impl_->models.to_sync([&]() -> const auto& { return reached.get(); });
  // Under join_uneven_inputs, the processes that ran out of batches wait in the scope's end for
  // this count to learn whether a backward is coming that they must shadow.
  if (impl_->join.open()) impl_->join.count_backward(syncing, impl_->host_group());
  // Each synchronised model learns which of its parameters this loss reaches: those it does not
  // are given zeros, so that no process waits for them (see GradientSynchronizer).
  // The graph is walked for that only where find_unused_parameters or static_graph asks (as DDP
  // walks it); otherwise hooks see what backward reaches.
  for (auto* m : syncing) {
    m->force_sync = false;
    const auto* reached_here = m->sync->needs_reached() ? &reached.get() : nullptr;
    scaled = m->sync->prepare_for_backward(scaled, reached_here, reached.partial(), ends_window);
  }
  const Shards sharded =
      shards_to_arm(impl_->sharding, impl_->models, impl_->distributed(), syncing, reached);
  for (auto& shards : sharded) shards->arm();
  parallel::release_shared_input();
  {
    FinishBackward finish{syncing, sharded};
    scaled.backward(gradient, retain_graph, create_graph);
    finish.completed = true;
  }
  const std::string usage_error =
      finish_sync(syncing, sharded, !retain_graph.value_or(create_graph));
  if (auto factor = count.factor(count_group != nullptr ? count_group->getSize() : 1)) {
    for (auto& shards : impl_->sharding.live()) shards->scale_gradients(*factor);
    impl_->models.scale_gradients(*factor);
  }
  TORCH_CHECK(usage_error.empty(), usage_error);
}

}  // namespace accel
