// FULL_SHARD: a unit's parameters made sharded parameters served from it, the window of units
// gathered at once and its prefetch (see unit_gather.h), and what the gathers have done.

#include "unit_gather.h"

#include "shard_unit.h"
#include "sharded_parameter.h"
#include "util/torch_compat.h"

#include <algorithm>
#include <array>
#include <thread>

namespace accel {
namespace sharding {

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
      unit->release_value();
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
  const bool on = util::in_backward() ? prefetch_backward : prefetch_forward;
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
      unit->release_value();
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

OptimizerShards::Fp8Plan OptimizerShards::plan_fp8_gather(const Unit& unit) const {
  Fp8Plan plan;
  const size_t n = unit.params.size();
  plan.scale_index.assign(n, -1);
  plan.rest_index.resize(n);
  std::vector<bool> converted(n, false);
  for (size_t i = 0; i < n; ++i) converted[i] = precision::gathers_in_fp8(unit.params[i]);
  if (std::none_of(converted.begin(), converted.end(), [](bool c) { return c; })) return plan;
  plan.layout = std::make_shared<Fp8UnitLayout>();
  auto& layout = *plan.layout;
  const int64_t rank = process_group_->getRank(), processes = process_group_->getSize();
  const int64_t size = unit.shard.numel();
  for (size_t i = 0; i < n; ++i) {
    if (converted[i]) plan.scale_index[i] = layout.weights++;
  }
  // Each process's elements of every parameter, in the order of the unit (so in each
  // parameter's own order); the other parameters' pieces as {process, place in its rest slot,
  // length}.
  std::vector<std::vector<std::array<int64_t, 3>>> pieces(n);
  std::vector<int64_t> count(processes, 0);
  for (int64_t p = 0; p < processes; ++p) {
    for (size_t i = 0; i < n; ++i) {
      const auto [in_param, in_shard, length] = unit.overlap(i, p * size, (p + 1) * size);
      (void)in_param;
      if (length == 0) continue;
      if (converted[i]) {
        if (p == rank) layout.mine_converted.push_back({in_shard, length, plan.scale_index[i]});
        continue;
      }
      pieces[i].push_back({p, count[p], length});
      if (p == rank) layout.mine_rest.push_back({in_shard, length, count[p]});
      count[p] += length;
    }
  }
  layout.rest_per_process = *std::max_element(count.begin(), count.end());
  for (size_t i = 0; i < n; ++i) {
    if (converted[i]) continue;
    std::vector<torch::Tensor> places;
    for (const auto& [p, at, length] : pieces[i]) {
      const int64_t first = p * layout.rest_per_process + at;
      places.push_back(torch::arange(first, first + length, torch::kLong));
    }
    plan.rest_index[i] = places.empty() ? torch::empty({0}, torch::kLong) : torch::cat(places);
    plan.rest_index[i] = plan.rest_index[i].to(unit.compute.device());
  }
  return plan;
}

void OptimizerShards::Gathered::start_in_fp8() {
  torch::NoGradGuard no_grad;
  util::CollectiveLabel collective_label("FULL_SHARD parameter gather in fp8");
  const auto& layout = *fp8_;
  const int64_t size = shard_.numel(), rank = group_->getRank();
  const int64_t processes = group_->getSize();
  const auto device = compute_.device();
  const auto shard = shard_.detach().to(device);
  // Each converted weight's amax over the whole tensor: each process's over its parts, then the
  // largest (exact: a max), so every process casts with the scale the whole weight's cast has.
  auto amax = torch::zeros({layout.weights}, torch::dtype(torch::kFloat).device(device));
  for (const auto& piece : layout.mine_converted) {
    amax[piece.at].copy_(
        shard.narrow(0, piece.shard_begin, piece.length).to(torch::kFloat).abs().max());
  }
  {
    std::vector<torch::Tensor> amaxes{amax};
    c10d::AllreduceOptions largest;
    largest.reduceOp = c10d::ReduceOp::MAX;
    group_->allreduce(amaxes, largest)->wait();
  }
  scales_ = precision::fp8_scale_for(amax, torch::kFloat8_e4m3fn, /*power_of_2=*/false);
  // One byte per element: the converted weights' FP8 bytes, zeros elsewhere. (Gloo refuses
  // float8 tensors; their bytes as uint8 go through.)
  staging_ = torch::zeros({size}, torch::dtype(torch::kByte).device(device));
  for (const auto& piece : layout.mine_converted) {
    const auto cast = precision::quantize_fp8_with_amax(
        shard.narrow(0, piece.shard_begin, piece.length), amax[piece.at], torch::kFloat8_e4m3fn);
    staging_.narrow(0, piece.shard_begin, piece.length).copy_(cast.data.view(torch::kByte));
  }
  // The other parameters' elements in bf16, each process's in a slot of the same length.
  const int64_t slot = layout.rest_per_process;
  if (slot > 0) {
    rest_staging_ = torch::zeros({slot}, torch::dtype(torch::kBFloat16).device(device));
    for (const auto& piece : layout.mine_rest) {
      rest_staging_.narrow(0, piece.at, piece.length)
          .copy_(shard.narrow(0, piece.shard_begin, piece.length));
    }
  }
  auto gather = [&](torch::Tensor& whole, torch::Tensor& sent, int64_t length, int64_t at) {
    if (through_all_reduce_) {
      whole = torch::zeros({length * processes}, sent.options());
      whole.narrow(0, at * length, length).copy_(sent);
      std::vector<torch::Tensor> tensors{whole};
      return group_->allreduce(tensors);
    }
    whole = torch::empty({length * processes}, sent.options());
    return group_->_allgather_base(whole, sent);
  };
  work_ = gather(value_, staging_, size, rank);
  if (slot > 0) rest_work_ = gather(rest_, rest_staging_, slot, rank);
  window_->gathered(value_, static_cast<int64_t>(staging_.nbytes()), rest_);
  window_->recent.push_back(weak_from_this());
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
  // FP8 training with the float8 all-gather: the unit's converted weights travel as FP8.
  const auto fp8 = plan_fp8_gather(unit);
  std::shared_ptr<Gathered> as_fp8;
  if (fp8.layout) {
    as_fp8 = std::make_shared<Gathered>(process_group_, through_all_reduce_, unit.shard,
                                        unit.compute, window_);
    as_fp8->gather_in_fp8(fp8.layout);
  }
  for (size_t i = 0; i < unit.params.size(); ++i) {
    auto source = std::make_shared<UnitParameter>(unit.gathered, as_bf16, as_fp16, unit.offsets[i],
                                                  unit.params[i].sizes().vec());
    if (as_fp8) {
      source->serve_from_fp8(as_fp8, fp8.scale_index[i], fp8.rest_index[i]);
      if (fp8.scale_index[i] >= 0) {
        precision::set_fp8_weight_gather(
            unit.params[i],
            [weak = std::weak_ptr<UnitParameter>(source)]() -> std::optional<precision::Fp8Tensor> {
              if (auto alive = weak.lock()) return alive->fp8_part();
              return std::nullopt;
            });
      }
    }
    shard_in_place(unit.params[i], std::move(source), unit.compute.device());
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

}  // namespace sharding
}  // namespace accel
