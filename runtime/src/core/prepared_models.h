#pragma once

// The models an Accelerator prepared, each with its gradient synchroniser and no_sync state:
// found by module, asked which of them a backward synchronises, and told to shadow, rebroadcast
// or scale. Owned by Accelerator::Impl; backward.cpp, the scopes and the checkpoint calls ask it.

#include "distributed/gradient_sync.h"

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

namespace accel {
namespace core {

struct PreparedModel {
  torch::nn::Module* module = nullptr;
  /// Null in a one-process job: nothing to synchronise, no hooks, no cost.
  std::unique_ptr<distributed::GradientSynchronizer> sync;
  int no_sync_depth = 0;
  bool force_sync = false;

  /// Outside every no_sync, or made to synchronise in this backward.
  bool syncs() const { return no_sync_depth == 0 || force_sync; }
};

class PreparedModels {
 public:
  using Leaves = std::unordered_set<const c10::TensorImpl*>;

  void add(PreparedModel model) { models_.push_back(std::move(model)); }
  /// Forgets every model (free_memory).
  void clear() { models_.clear(); }
  bool contains(const torch::nn::Module* module) const;
  size_t size() const { return models_.size(); }
  /// The modules, in preparation order.
  std::vector<torch::nn::Module*> modules() const;

  void enter_no_sync(const torch::nn::Module* module);
  void exit_no_sync(const torch::nn::Module* module);
  /// trigger_sync_in_backward: the next backward synchronises `module` even inside no_sync.
  void force_sync(const torch::nn::Module* module);
  /// Some model synchronises in the next backward (one process's shards take the gradients
  /// then); the forced ones are reset.
  bool take_any_syncing();

  /// The models this backward synchronises: those with a synchroniser outside no_sync and, with
  /// several synchronised models, only those whose parameters are among `reached()` (a reducer
  /// armed for a model that gets no gradient would wait for it forever).
  std::vector<PreparedModel*> to_sync(const std::function<const Leaves&()>& reached);

  /// Under join_uneven_inputs, once per round the others still train: each of `modules`'
  /// synchroniser joins a backward with zeros and the buffers' broadcast.
  void shadow_backward(const std::vector<const torch::nn::Module*>& modules);
  /// Each of `modules` takes process `rank`'s parameters and buffers.
  void broadcast_from(const std::vector<const torch::nn::Module*>& modules, int64_t rank);
  /// Multiplies every model's gradients by `factor`.
  void scale_gradients(double factor);

  /// Backwards that averaged a model's gradients across processes, summed over the models.
  int64_t gradient_all_reduces() const;
  /// Under a compression hook: the bytes the buckets held and the bytes sent, summed.
  std::pair<int64_t, int64_t> compressed_bytes() const;

 private:
  PreparedModel* find(const torch::nn::Module* module);
  std::vector<PreparedModel> models_;
};

}  // namespace core
}  // namespace accel
