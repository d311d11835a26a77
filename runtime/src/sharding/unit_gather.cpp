// FULL_SHARD: a unit's parameters made sharded parameters served from it, the window of units
// gathered at once and its prefetch (see unit_gather.h), and what the gathers have done.

#include "unit_gather.h"

#include "shard_unit.h"
#include "sharded_parameter.h"
#include "util/torch_compat.h"

#include <thread>

namespace accel {
namespace detail {

void OptimizerShards::GatherWindow::release(torch::Tensor& value) {
  if (!value.defined()) return;
  released.emplace_back(value.storage().getWeakStorageImpl());
  value.reset();
}

bool OptimizerShards::GatherWindow::make_room(size_t room, const Gathered* keep) {
  auto oldest = recent.begin();
  while (recent.size() + room > units_whole) {
    while (oldest != recent.end()) {
      auto unit = oldest->lock();
      if (unit == nullptr || unit.get() != keep) break;
      ++oldest;
    }
    if (oldest == recent.end()) return false;
    if (auto unit = oldest->lock()) {
      unit->settle();
      release(unit->value_);
    }
    oldest = recent.erase(oldest);
  }
  // Every value released since the last gather, here or elsewhere (a unit whose shard changed,
  // the end of a step), must be gone before the next unit is allocated. A collective's worker
  // thread lets go of its tensors a moment after the collective completes (Gloo's work queue):
  // wait for that, as FSDP's limit_all_gathers waits for the freed unit's event. On a loaded
  // machine the worker may not run again for a scheduler slice or more (a 20 ms wait was seen to
  // fall short with two jobs on two cores; a value released at a step's end and not waited for
  // was still held two gathers later with four), so the wait sleeps, leaving it the core, for up
  // to 200 ms; it is over in microseconds otherwise. An operator still using a value keeps it
  // past the wait.
  const auto still_held = [&] {
    return std::any_of(released.begin(), released.end(),
                       [](const auto& s) { return !s.expired(); });
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  for (int spins = 0; still_held() && std::chrono::steady_clock::now() < deadline; ++spins) {
    if (spins < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  released.clear();
  return true;
}

bool OptimizerShards::GatherWindow::note_use(Gathered* unit) {
  if (unit == last_used) return false;
  last_used = unit;
  if (!prefetch_forward && !prefetch_backward) return false;
  // A loop that never steps (evaluation) never ends a recording: it is not kept past a bound.
  constexpr size_t kLongestRecording = size_t{1} << 16;
  if (recording.size() < kLongestRecording) recording.push_back(unit->weak_from_this());
  return true;
}

void OptimizerShards::GatherWindow::prefetch_after(const Gathered* unit) {
  const bool on = in_backward() ? prefetch_backward : prefetch_forward;
  // Where this use is in the last step's order: the next place, or the order is left.
  if (diverged || position >= recorded.size() || recorded[position].lock().get() != unit) {
    diverged = true;
    return;
  }
  ++position;
  if (!on || position >= recorded.size()) return;
  auto next = recorded[position].lock();
  if (next == nullptr || next.get() == unit || next->whole_now()) return;
  if (!make_room(1, unit)) return;
  next->start();
  ++prefetches;
}

void OptimizerShards::GatherWindow::drop_all() {
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& entry : recent) {
    if (auto unit = entry.lock()) {
      unit->settle();
      release(unit->value_);
    }
  }
  recent.clear();
  // A step ends: its order of uses is the one the next step prefetches by.
  recorded = std::move(recording);
  recording.clear();
  position = 0;
  diverged = false;
  last_used = nullptr;
}

void OptimizerShards::shard_unit_parameters(Unit& unit, bool empty) {
  // The shard takes its slice away; the whole buffer goes, and each parameter becomes a sharded
  // parameter served from the unit.
  if (!offload_ && !empty) unit.shard = unit.shard.clone();
  unit.flat = torch::Tensor();
  unit.gathered = std::make_shared<Gathered>(process_group_, through_all_reduce_, unit.shard,
                                             unit.compute, window_);
  // fp32 parameters under autocast are gathered in its dtype (FSDP's MixedPrecision
  // param_dtype); the shards, their gradients and the optimizer stay fp32.
  std::shared_ptr<Gathered> as_bf16, as_fp16;
  if (unit.compute.dtype() == torch::kFloat) {
    as_bf16 = std::make_shared<Gathered>(process_group_, through_all_reduce_, unit.shard,
                                         unit.compute.dtype(torch::kBFloat16), window_);
    as_fp16 = std::make_shared<Gathered>(process_group_, through_all_reduce_, unit.shard,
                                         unit.compute.dtype(torch::kHalf), window_);
  }
  for (size_t i = 0; i < unit.params.size(); ++i) {
    shard_in_place(unit.params[i],
                   std::make_shared<UnitParameter>(unit.gathered, as_bf16, as_fp16, unit.offsets[i],
                                                   unit.params[i].sizes().vec()),
                   unit.compute.device());
  }
}

void OptimizerShards::set_prefetch(bool forward, bool backward) {
  if (!window_) return;
  std::lock_guard<std::mutex> lock(window_->mutex);
  window_->prefetch_forward = forward;
  window_->prefetch_backward = backward;
}

OptimizerShards::GatherStatistics OptimizerShards::gather_statistics() const {
  GatherStatistics statistics;
  if (!window_) return statistics;
  std::lock_guard<std::mutex> lock(window_->mutex);
  statistics.gathers = window_->gathers;
  statistics.alive_bytes = window_->alive_bytes();
  statistics.peak_bytes = window_->peak_bytes;
  statistics.gathered_bytes = window_->gathered_bytes;
  statistics.prefetches = window_->prefetches;
  statistics.gather_wait_seconds = window_->wait_seconds;
  for (const auto& unit : units_) {
    const int64_t element = static_cast<int64_t>(unit.compute.dtype().itemsize());
    statistics.largest_unit_bytes = std::max(statistics.largest_unit_bytes,
                                             unit.shard_size * process_group_->getSize() * element);
    statistics.largest_shard_bytes =
        std::max(statistics.largest_shard_bytes, unit.shard_size * element);
  }
  return statistics;
}

void OptimizerShards::reset_gather_peak() {
  if (!window_) return;
  std::lock_guard<std::mutex> lock(window_->mutex);
  window_->peak_bytes = window_->alive_bytes();
}

void OptimizerShards::set_units_whole(size_t units) {
  TORCH_CHECK(units >= 1, "accel: at least one unit must be whole to run its operators");
  if (!window_) return;
  std::lock_guard<std::mutex> lock(window_->mutex);
  window_->units_whole = units;
  window_->make_room(0);
}

}  // namespace detail
}  // namespace accel
