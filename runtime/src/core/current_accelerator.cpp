// Accelerator::current(): the process's Accelerators in construction order. A stack, not one
// pointer: a test or a program may make a second Accelerator while the first lives (the second
// is current until it is destroyed, then the first again). Guarded by a mutex: a callback run on
// a loader's worker thread may ask.
#include "current_accelerator.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::core {
namespace {

struct LiveAccelerators {
  std::mutex mutex;
  std::vector<std::pair<Accelerator*, detail::SourcePlace>> live;
  /// Where the last one destroyed was made; named when none is left.
  std::optional<detail::SourcePlace> last_gone;
};

LiveAccelerators& live_accelerators() {
  // Never destroyed: an Accelerator with static storage may outlive a function-local static.
  static auto* registry = new LiveAccelerators();
  return *registry;
}

std::string where(const detail::SourcePlace& place) {
  return std::string(place.file) + ":" + std::to_string(place.line);
}

}  // namespace

void register_accelerator(Accelerator& accelerator, detail::SourcePlace created_at) {
  LiveAccelerators& registry = live_accelerators();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.live.emplace_back(&accelerator, created_at);
}

void unregister_accelerator(const Accelerator& accelerator) {
  LiveAccelerators& registry = live_accelerators();
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto found = std::find_if(registry.live.begin(), registry.live.end(),
                            [&](const auto& entry) { return entry.first == &accelerator; });
  if (found == registry.live.end()) return;
  registry.last_gone = found->second;
  registry.live.erase(found);
}

}  // namespace accel::core

namespace accel {

Accelerator& Accelerator::current() {
  core::LiveAccelerators& registry = core::live_accelerators();
  std::lock_guard<std::mutex> lock(registry.mutex);
  if (!registry.live.empty()) return *registry.live.back().first;
  const std::string message =
      registry.last_gone
          ? "accel::Accelerator::current(): no Accelerator is alive in this process; the last "
            "one, created at " +
                core::where(*registry.last_gone) +
                ", was destroyed before this call. Keep it alive while the code that uses it runs"
          : "accel::Accelerator::current(): no Accelerator has been created in this process yet; "
            "create one before this call (`accel::Accelerator accelerator;` at the start of "
            "main), and keep it alive while the code that uses it runs";
  C10_THROW_ERROR(Error, message);
}

bool Accelerator::has_current() {
  core::LiveAccelerators& registry = core::live_accelerators();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return !registry.live.empty();
}

}  // namespace accel
