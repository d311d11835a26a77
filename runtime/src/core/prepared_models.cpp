#include "prepared_models.h"

#include <torch/types.h>

#include <algorithm>
#include <unordered_set>

namespace accel {
namespace core {

PreparedModel* PreparedModels::find(const torch::nn::Module* module) {
  for (auto& m : models_) {
    if (m.module == module) return &m;
  }
  return nullptr;
}

bool PreparedModels::contains(const torch::nn::Module* module) const {
  return std::any_of(models_.begin(), models_.end(),
                     [module](const PreparedModel& m) { return m.module == module; });
}

std::vector<torch::nn::Module*> PreparedModels::modules() const {
  std::vector<torch::nn::Module*> modules;
  for (const auto& m : models_) modules.push_back(m.module);
  return modules;
}

void PreparedModels::enter_no_sync(const torch::nn::Module* module) {
  if (auto* m = find(module)) ++m->no_sync_depth;
}
void PreparedModels::exit_no_sync(const torch::nn::Module* module) {
  if (auto* m = find(module)) m->no_sync_depth = std::max(0, m->no_sync_depth - 1);
}
void PreparedModels::force_sync(const torch::nn::Module* module) {
  if (auto* m = find(module)) m->force_sync = true;
}

bool PreparedModels::take_any_syncing() {
  const bool any =
      std::any_of(models_.begin(), models_.end(), [](const PreparedModel& m) { return m.syncs(); });
  if (any) {
    for (auto& m : models_) m.force_sync = false;
  }
  return any;
}

std::vector<PreparedModel*> PreparedModels::to_sync(const std::function<const Leaves&()>& reached) {
  std::vector<PreparedModel*> syncing;
  size_t synchronised = 0;
  for (auto& m : models_) {
    if (m.sync) ++synchronised;
    if (m.sync && m.syncs()) syncing.push_back(&m);
  }
  if (synchronised > 1) {
    // Judged whenever the program has several, not only when several are outside no_sync: two
    // models trained in turn under accumulate_until hold one in no_sync on its micro-steps, and
    // the other, outside every scope, is not this loss's.
    syncing.erase(std::remove_if(syncing.begin(), syncing.end(),
                                 [&](PreparedModel* m) { return !m->sync->uses_any(reached()); }),
                  syncing.end());
  }
  return syncing;
}

void PreparedModels::shadow_backward(const std::vector<const torch::nn::Module*>& modules) {
  for (const auto* module : modules) {
    auto* m = find(module);
    if (m == nullptr || !m->sync) continue;
    m->sync->shadow_backward();
    m->sync->sync_buffers();
  }
}

void PreparedModels::broadcast_from(const std::vector<const torch::nn::Module*>& modules,
                                    int64_t rank) {
  for (const auto* module : modules) {
    auto* m = find(module);
    if (m != nullptr && m->sync) m->sync->broadcast_from(rank);
  }
}

void PreparedModels::scale_gradients(double factor) {
  torch::NoGradGuard no_grad;
  // Once per tensor, however many names a module registers it under.
  std::unordered_set<const c10::TensorImpl*> scaled;
  for (auto& m : models_) {
    for (auto& p : m.module->parameters()) {
      if (p.grad().defined() && scaled.insert(p.unsafeGetTensorImpl()).second) {
        p.mutable_grad().mul_(factor);
      }
    }
  }
}

int64_t PreparedModels::gradient_all_reduces() const {
  int64_t total = 0;
  for (const auto& m : models_) {
    if (m.sync) total += m.sync->synchronised_backwards();
  }
  return total;
}

std::pair<int64_t, int64_t> PreparedModels::compressed_bytes() const {
  std::pair<int64_t, int64_t> total{0, 0};
  for (const auto& m : models_) {
    if (!m.sync) continue;
    const auto [buckets, sent] = m.sync->compressed_bytes();
    total.first += buckets;
    total.second += sent;
  }
  return total;
}

}  // namespace core
}  // namespace accel
