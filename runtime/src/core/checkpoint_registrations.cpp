#include "checkpoint_registrations.h"

#include <c10/util/Exception.h>

#include <utility>

namespace accel {
namespace core {

namespace {

template <typename Hook>
RemovableHandle add_hook(const std::shared_ptr<std::map<int64_t, Hook>>& hooks, int64_t& next_id,
                         Hook hook) {
  TORCH_CHECK(hook, "accel: a state pre-hook must be callable");
  const int64_t id = next_id++;
  hooks->emplace(id, std::move(hook));
  std::weak_ptr<std::map<int64_t, Hook>> registry = hooks;
  return RemovableHandle([registry, id] {
    if (auto live = registry.lock()) live->erase(id);
  });
}

}  // namespace

RemovableHandle CheckpointRegistrations::add_save_hook(SaveStatePreHook hook) {
  return add_hook(save_hooks_, next_id_, std::move(hook));
}

RemovableHandle CheckpointRegistrations::add_load_hook(LoadStatePreHook hook) {
  return add_hook(load_hooks_, next_id_, std::move(hook));
}

}  // namespace core
}  // namespace accel
