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

using detail::PreparedModel;

using Shards = std::vector<std::shared_ptr<detail::OptimizerShards>>;

namespace detail {

/// The parameters a loss reaches, found once (a walk of the graph) if some filter needs them.
/// Checkpoint blocks' parameters join when the block knows them (a CheckpointWrapper's); a block
/// that does not leaves the set partial.
class ReachedParameters {
 public:
  explicit ReachedParameters(const torch::Tensor& loss) : loss_(loss) {}

  const std::unordered_set<const c10::TensorImpl*>& get() {
    if (reached_) return *reached_;
    std::vector<torch::Tensor> in_blocks;
    reached_ = detail::autograd_leaves(loss_, [&](const torch::autograd::Node& node) {
      auto block = detail::checkpointed_parameters(node);
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

}  // namespace detail

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

}  // namespace

void Accelerator::backward(const torch::Tensor& loss_sum, int64_t num_items) {
  TORCH_CHECK(num_items > 0,
              "accel: backward(loss_sum, num_items) takes the number of items the "
              "loss sums over, and num_items is ",
              num_items, " (expected > 0)");
  impl_->pending_items = num_items;
  backward(loss_sum);
}

void Accelerator::backward(const torch::Tensor& loss, const torch::Tensor& gradient,
                           std::optional<bool> retain_graph, bool create_graph) {
  detail::CollectiveLabel collective_label("backward");
  // backward(loss_sum, num_items): the window's gradients are divided by its items, counted over
  // every micro-step and process, once they are summed.
  const auto items = std::exchange(impl_->pending_items, std::nullopt);
  const bool ends_window = impl_->count_items(items);
  // Counted where gradients average: on a device mesh its data and cp processes (a tp group's
  // processes hold the same items, counted once), else every process.
  c10d::ProcessGroup* count_group = nullptr;
  if (impl_->distributed()) {
    count_group = impl_->mesh != nullptr ? impl_->gradient_group().get() : &impl_->host_group();
  }
  ItemCount count(items && ends_window, impl_->item_window.items, count_group);
  // Inside accumulate_until the program divides its loss itself, if it does; a sum over counted
  // items is divided by their count instead.
  const int64_t steps =
      impl_->program_counts_accumulation || items ? 1 : impl_->options.gradient_accumulation_steps;
  torch::Tensor scaled = steps > 1 ? loss / static_cast<double>(steps) : loss;
  if (auto* scaler = this->scaler()) scaled = scaler->scale(scaled);

  detail::ReachedParameters reached(scaled);
  const auto syncing = impl_->models_to_sync(reached);
  impl_->count_join_backward(syncing);
  // Each synchronised model learns which of its parameters this loss reaches: those it does not
  // are given zeros, so that no process waits for them (see GradientSynchronizer).
  for (auto* m : syncing) {
    m->force_sync = false;
    const auto& reached_here = reached.get();
    scaled = m->sync->prepare_for_backward(scaled, reached_here, reached.partial(), ends_window);
  }
  const Shards sharded = impl_->shards_to_arm(syncing, reached);
  for (auto& shards : sharded) shards->arm();
  detail::release_shared_input();
  {
    FinishBackward finish{syncing, sharded};
    scaled.backward(gradient, retain_graph, create_graph);
    finish.completed = true;
  }
  const std::string usage_error =
      impl_->finish_sync(syncing, sharded, !retain_graph.value_or(create_graph));
  if (auto factor = count.factor(count_group != nullptr ? count_group->getSize() : 1)) {
    impl_->scale_gradients(*factor);
  }
  TORCH_CHECK(usage_error.empty(), usage_error);
}

bool Accelerator::Impl::count_items(std::optional<int64_t> items) {
  auto& window = item_window;
  if (!window.open) window = {true, items.has_value(), 0};
  const bool mixed = window.counts_items != items.has_value();
  if (items) window.items += *items;
  const bool ends_window = gradient_state->sync_gradients;
  if (ends_window) window.open = false;
  TORCH_CHECK(!mixed,
              "accel: this accumulation window mixes backward(loss) and backward(loss_sum, "
              "num_items); a window's losses are all means or all sums over counted items");
  TORCH_CHECK(!items || join_models.empty(),
              "accel: backward(loss_sum, num_items) counts items with a collective, which the "
              "processes that ran out of batches under join_uneven_inputs do not join; use "
              "backward(loss) there");
  return ends_window;
}

std::vector<PreparedModel*> Accelerator::Impl::models_to_sync(detail::ReachedParameters& reached) {
  std::vector<PreparedModel*> syncing;
  size_t synchronised = 0;
  for (auto& m : models) {
    if (m.sync) ++synchronised;
    if (m.sync && (m.no_sync_depth == 0 || m.force_sync)) syncing.push_back(&m);
  }
  if (synchronised > 1) {
    // With several models, arm only those this loss reaches: a reducer armed for a model that
    // gets no gradient would wait for it forever. Judged whenever the program has several, not
    // only when several are outside no_sync: two models trained in turn under accumulate_until
    // hold one in no_sync on its micro-steps, and the other, outside every scope, is not this
    // loss's.
    syncing.erase(
        std::remove_if(syncing.begin(), syncing.end(),
                       [&](PreparedModel* m) { return !m->sync->uses_any(reached.get()); }),
        syncing.end());
  }
  return syncing;
}

void Accelerator::Impl::count_join_backward(const std::vector<PreparedModel*>& syncing) {
  // Under join_uneven_inputs, the processes that ran out of batches wait in end_join for this
  // count to learn whether a backward is coming that they must shadow.
  const bool joined = std::any_of(syncing.begin(), syncing.end(), [&](PreparedModel* m) {
    return std::count(join_models.begin(), join_models.end(), m->module) > 0;
  });
  if (join_models.empty() || !joined) return;
  auto still_training = torch::ones({1}, torch::kInt64);
  detail::all_reduce(host_group(), still_training, Reduction::Sum);
  ++join_backwards;
}

Shards Accelerator::Impl::shards_to_arm(const std::vector<PreparedModel*>& syncing,
                                        detail::ReachedParameters& reached) {
  // One process that shards (CPU offload) has no synchronisers: its shards take the gradients
  // on every backward outside no_sync.
  const bool one_process_syncs =
      !distributed() && sharded() && std::any_of(models.begin(), models.end(), [](const auto& m) {
        return m.no_sync_depth == 0 || m.force_sync;
      });
  if (one_process_syncs) {
    for (auto& m : models) m.force_sync = false;
  }
  // Sharded optimizers whose parameters this backward reaches: ZeRO-2's send each unit's
  // gradients as backward finishes them.
  Shards armed;
  if (!syncing.empty() || one_process_syncs) armed = live_shards();
  if (armed.size() > 1) {
    armed.erase(
        std::remove_if(armed.begin(), armed.end(),
                       [&](const auto& shards) { return !shards->holds_any(reached.get()); }),
        armed.end());
  }
  return armed;
}

std::string Accelerator::Impl::finish_sync(const std::vector<PreparedModel*>& syncing,
                                           const Shards& sharded, bool graph_freed) {
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

void Accelerator::Impl::scale_gradients(double factor) {
  torch::NoGradGuard no_grad;
  for (auto& shards : live_shards()) shards->scale_gradients(factor);
  for (auto& m : models) {
    for (auto& p : m.module->parameters()) {
      if (p.grad().defined()) p.mutable_grad().mul_(factor);
    }
  }
}

}  // namespace accel
