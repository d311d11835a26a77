#pragma once

// FULL_SHARD's units gathered on demand (OptimizerShards' private parts, shared by its two source
// files): the window of units whole at once and its prefetch, a unit gathered in one dtype, and
// a sharded parameter's place in its unit.

#include "optimizer_shards.h"

#include "precision/fp8_linear.h"
#include "sharded_parameter.h"
#include "util/collective_label.h"

#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace accel {
namespace sharding {

/// Where a unit holding FP8-converted weights puts its elements when gathered in FP8
/// (Fp8Options.fsdp_float8_all_gather, as torchao's float8 all-gather): every element travels as
/// one byte, the converted weights' FP8 casts with one scale each agreed by a max-reduction of
/// the processes' amaxes; the unit's other elements (biases, norms) also travel in bf16, each
/// process sending its own padded to the largest count.
struct Fp8UnitLayout {
  /// Elements of this process's shard: [shard_begin, shard_begin + length), and `at`: a
  /// converted weight's scale index, or where they go in the rest slot.
  struct Piece {
    int64_t shard_begin = 0, length = 0, at = 0;
  };
  int64_t weights = 0;                // the unit's converted weights (scales)
  std::vector<Piece> mine_converted;  // this process's parts of them
  std::vector<Piece> mine_rest;       // this process's elements of the other parameters
  int64_t rest_per_process = 0;       // the rest slot each process sends (the largest count)
};

/// FULL_SHARD: the units that are whole at the moment, most recently gathered last. Operators use
/// a unit's parameters one after another (a layer's weight, then its bias), and backward begins
/// with the units forward ended with: the last `units_whole` gathered stay whole, older ones are
/// freed. A gather frees the oldest *before* it allocates, so at most `units_whole` units (and one
/// staging copy of a shard) are ever alive at once: FSDP's limit_all_gathers. Every process
/// gathers and frees in the same order, so all agree on what is whole.
///
/// Prefetch: the window records the order in which units are first used, step by step. In the
/// next step, when a unit is first used at the place the recording expects, the all-gather of the
/// unit used after it is started at once, asynchronously, in place of the oldest unit whole: the
/// unit running and the next one, as FSDP's forward prefetch and BACKWARD_PRE. A step that leaves
/// the recorded order stops prefetching until the next step. Every process runs the same program,
/// so all record the same order and start the same collectives at the same points.
class OptimizerShards::GatherWindow {
 public:
  std::mutex mutex;  // held across a gather: autograd may run operators on its device threads
  std::deque<std::weak_ptr<Gathered>> recent;
  size_t units_whole = 2;
  int64_t gathers = 0;
  int64_t peak_bytes = 0;
  int64_t gathered_bytes = 0;                                     // whole values received
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> issued;  // every gathered value's storage
  bool prefetch_forward = false, prefetch_backward = false;
  std::vector<std::weak_ptr<Gathered>> recorded;   // the last step's order of first uses
  std::vector<std::weak_ptr<Gathered>> recording;  // this step's
  size_t position = 0;                             // where this step is in `recorded`
  bool diverged = false;
  const Gathered* last_used = nullptr;
  int64_t prefetches = 0;
  double wait_seconds = 0;

  /// whole values freed since the last gather, waited for before the next allocates
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> released;

  void drop_all();
  /// Frees a unit's whole value (defined or not); make_room waits for its storage to go.
  void release(torch::Tensor& value);
  /// Frees the oldest whole units, but `keep`, until `room` more fit in the window, and waits for
  /// every value released since the last call to be gone; false when they cannot fit.
  bool make_room(size_t room, const Gathered* keep = nullptr);
  /// Notes that `unit` is being used; true when it starts a new place in the order of uses.
  bool note_use(Gathered* unit);
  /// After the first use of `unit` at its place: starts gathering the unit that came next in the
  /// last step, when prefetch is on for this phase.
  void prefetch_after(const Gathered* unit);
  /// Bytes of the gathered values still alive (whole, or referred to by an operator).
  int64_t alive_bytes() {
    issued.erase(std::remove_if(issued.begin(), issued.end(),
                                [](const auto& storage) { return storage.expired(); }),
                 issued.end());
    int64_t bytes = 0;
    for (const auto& weak : issued) {
      if (auto storage = weak.lock()) bytes += static_cast<int64_t>(storage->nbytes());
    }
    return bytes;
  }
  /// Counts a gather of `value`, through a staging copy of `staging_bytes` alive beside it,
  /// and of `also` (another part of the same gather, undefined for none).
  void gathered(const torch::Tensor& value, int64_t staging_bytes,
                const torch::Tensor& also = torch::Tensor()) {
    ++gathers;
    for (const auto* part : {&value, &also}) {
      if (!part->defined()) continue;
      gathered_bytes += static_cast<int64_t>(part->nbytes());
      issued.emplace_back(part->storage().getWeakStorageImpl());
    }
    peak_bytes = std::max(peak_bytes, alive_bytes() + staging_bytes);
  }
};

/// A unit's parameters, gathered whole from the shards when an operator needs one of them.
class OptimizerShards::Gathered : public std::enable_shared_from_this<Gathered> {
 public:
  Gathered(c10::intrusive_ptr<c10d::ProcessGroup> group, bool through_all_reduce,
           torch::Tensor shard, torch::TensorOptions compute, std::shared_ptr<GatherWindow> window)
      : group_(std::move(group)),
        through_all_reduce_(through_all_reduce),
        shard_(std::move(shard)),
        compute_(compute),
        window_(std::move(window)) {}

  /// The unit's flat value, padding included, on the parameters' device (the shard may be on the
  /// host: CPU offload).
  torch::Tensor whole() { return whole_parts().value; }

  /// A unit gathered in FP8: its bytes (every element's), the other parameters' elements in bf16
  /// (each process's rest slot in turn), and the converted weights' scales.
  struct Parts {
    torch::Tensor value, rest, scales;
  };
  Parts whole_parts() {
    std::lock_guard<std::mutex> lock(window_->mutex);
    const bool new_place = window_->note_use(this);
    if (!value_.defined()) {
      window_->make_room(1, this);
      start();
    }
    settle();
    if (new_place) window_->prefetch_after(this);
    return {value_, rest_, scales_};
  }

  /// Makes this a gather in FP8 (`layout`) instead of in the compute dtype.
  void gather_in_fp8(std::shared_ptr<const Fp8UnitLayout> layout) { fp8_ = std::move(layout); }

  /// Starts gathering the unit (called with the window's mutex held); it joins the window.
  void start() {
    if (fp8_) {
      start_in_fp8();
      return;
    }
    torch::NoGradGuard no_grad;
    util::CollectiveLabel collective_label("FULL_SHARD parameter gather");
    const int64_t size = shard_.numel(), rank = group_->getRank();
    int64_t staging_bytes = 0;
    if (through_all_reduce_) {
      // As gather_parameters: zeros everywhere but this process's slice, summed.
      value_ = torch::zeros({size * group_->getSize()}, compute_);
      value_.narrow(0, rank * size, size).copy_(shard_.detach());
      std::vector<torch::Tensor> tensors{value_};
      work_ = group_->allreduce(tensors);
    } else {
      value_ = torch::empty({size * group_->getSize()}, compute_);
      // The shard itself is sent when it is on the parameters' device in their dtype; a host
      // shard (CPU offload) goes through a copy there, which lives until the gather completes.
      staging_ = shard_.detach();
      if (staging_.device() != compute_.device() || staging_.dtype() != compute_.dtype()) {
        staging_ = torch::empty({size}, compute_);
        staging_.copy_(shard_.detach());
        staging_bytes = static_cast<int64_t>(staging_.nbytes());
      }
      work_ = group_->_allgather_base(value_, staging_);
    }
    window_->gathered(value_, staging_bytes);
    window_->recent.push_back(weak_from_this());
  }

  /// Waits for a gather under way (called with the window's mutex held).
  void settle() {
    if (!work_ && !rest_work_) return;
    const auto start = std::chrono::steady_clock::now();
    if (work_) work_->wait();
    if (rest_work_) rest_work_->wait();
    window_->wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    work_.reset();
    rest_work_.reset();
    staging_ = torch::Tensor();
    rest_staging_ = torch::Tensor();
  }

  /// Frees the whole value and what came with it (called with the window's mutex held).
  void release_value() {
    window_->release(value_);
    window_->release(rest_);
    scales_ = torch::Tensor();
  }

  bool whole_now() const { return value_.defined(); }
  /// This process's slice of the unit's flat range: {first element, elements}.
  std::pair<int64_t, int64_t> kept_slice() const {
    return {group_->getRank() * shard_.numel(), shard_.numel()};
  }

  /// Writes this process's part of `flat_value` (the unit's elements [begin, begin + length))
  /// into the shard; the unit is gathered anew at its next use.
  void assign(const torch::Tensor& flat_value, int64_t begin) {
    std::lock_guard<std::mutex> lock(window_->mutex);
    torch::NoGradGuard no_grad;
    settle();
    const int64_t size = shard_.numel();
    const int64_t mine = group_->getRank() * size;
    const int64_t first = std::max(begin, mine);
    const int64_t last = std::min(begin + flat_value.numel(), mine + size);
    if (last > first) {
      shard_.detach()
          .narrow(0, first - mine, last - first)
          .copy_(flat_value.narrow(0, first - begin, last - first));
    }
    forget();
  }

  /// Frees the whole value; the shard has changed (another view of the unit wrote it).
  void drop() {
    std::lock_guard<std::mutex> lock(window_->mutex);
    forget();
  }

  /// Frees the whole value (called with the window's mutex held).
  void forget() {
    settle();
    release_value();
    auto& recent = window_->recent;
    const auto self = weak_from_this();
    recent.erase(std::remove_if(recent.begin(), recent.end(),
                                [&](const std::weak_ptr<Gathered>& entry) {
                                  return !entry.owner_before(self) && !self.owner_before(entry);
                                }),
                 recent.end());
  }

 private:
  friend class GatherWindow;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  bool through_all_reduce_;
  torch::Tensor shard_;
  torch::TensorOptions compute_;
  std::shared_ptr<GatherWindow> window_;
  torch::Tensor value_;
  c10::intrusive_ptr<c10d::Work> work_;  // a gather under way (prefetched)
  torch::Tensor staging_;                // what it sends
  // Gathered in FP8 (unit_gather.cpp): the layout, the other parameters' bf16 elements and the
  // scales, and the rest's gather under way.
  void start_in_fp8();
  std::shared_ptr<const Fp8UnitLayout> fp8_;
  torch::Tensor rest_, rest_staging_, scales_;
  c10::intrusive_ptr<c10d::Work> rest_work_;
};

/// A unit's FP8 gather: its layout, and for each parameter its scale's index (converted weights)
/// or its elements' places in the gathered rest (the others).
struct OptimizerShards::Fp8Plan {
  std::shared_ptr<Fp8UnitLayout> layout;
  std::vector<int64_t> scale_index;
  std::vector<torch::Tensor> rest_index;
};

/// A sharded parameter's source: its place in its unit. Autocast's casts to bf16 or fp16 are
/// served from the unit gathered in that dtype: the same bits (the cast is elementwise) for half
/// the bytes on the wire, and half the memory while whole.
class OptimizerShards::UnitParameter final : public ParameterSource {
 public:
  UnitParameter(std::shared_ptr<Gathered> unit, std::shared_ptr<Gathered> as_bf16,
                std::shared_ptr<Gathered> as_fp16, int64_t offset, std::vector<int64_t> sizes)
      : unit_(std::move(unit)),
        as_bf16_(std::move(as_bf16)),
        as_fp16_(std::move(as_fp16)),
        offset_(offset),
        sizes_(std::move(sizes)) {}
  /// In a unit gathered in FP8: the converted weight `scale_index` (>= 0), or another parameter
  /// whose elements are at `rest_index` of the gathered bf16 rest.
  void serve_from_fp8(std::shared_ptr<Gathered> as_fp8, int64_t scale_index,
                      torch::Tensor rest_index) {
    as_fp8_ = std::move(as_fp8);
    scale_index_ = scale_index;
    rest_index_ = std::move(rest_index);
  }
  /// The converted weight's FP8 cast, gathered; none for another parameter.
  std::optional<precision::Fp8Tensor> fp8_part() {
    if (!as_fp8_ || scale_index_ < 0) return std::nullopt;
    const auto parts = as_fp8_->whole_parts();
    auto data = parts.value.narrow(0, offset_, c10::multiply_integers(sizes_))
                    .view(torch::kFloat8_e4m3fn)
                    .view(sizes_);
    return precision::Fp8Tensor{std::move(data), parts.scales.select(0, scale_index_)};
  }
  torch::Tensor gather() override { return part_of(*unit_); }
  torch::Tensor gather_as(c10::ScalarType dtype) override {
    if (dtype == c10::kBFloat16 && as_fp8_ && rest_index_.defined()) {
      // A bias beside FP8 weights: from the unit's FP8 gather, not a second gather in bf16.
      return as_fp8_->whole_parts().rest.index_select(0, rest_index_).view(sizes_);
    }
    if (dtype == c10::kBFloat16 && as_bf16_) return part_of(*as_bf16_);
    if (dtype == c10::kHalf && as_fp16_) return part_of(*as_fp16_);
    return gather().to(dtype);
  }
  void assign(const torch::Tensor& value) override {
    unit_->assign(value.reshape(-1), offset_);
    drop_casts();
  }
  std::pair<int64_t, int64_t> kept_elements() const override {
    const auto [slice_begin, slice_size] = unit_->kept_slice();
    const int64_t numel = c10::multiply_integers(sizes_);
    const int64_t first = std::max(offset_, slice_begin);
    const int64_t last = std::min(offset_ + numel, slice_begin + slice_size);
    if (last <= first) return {0, 0};
    return {first - offset_, last - first};
  }
  void assign_kept(const torch::Tensor& values, int64_t from) override {
    const auto [first, count] = kept_elements();
    TORCH_CHECK(from >= 0 && from + values.numel() <= count, "accel: ", count,
                " elements are kept here, and elements [", from, ", ", from + values.numel(),
                ") were given");
    if (values.numel() == 0) return;
    unit_->assign(values.reshape(-1), offset_ + first + from);
    drop_casts();
  }

 private:
  void drop_casts() {
    if (as_bf16_) as_bf16_->drop();
    if (as_fp16_) as_fp16_->drop();
    if (as_fp8_) as_fp8_->drop();
  }
  torch::Tensor part_of(Gathered& gathered) {
    return gathered.whole().narrow(0, offset_, c10::multiply_integers(sizes_)).view(sizes_);
  }
  std::shared_ptr<Gathered> unit_, as_bf16_, as_fp16_, as_fp8_;
  int64_t scale_index_ = -1;
  torch::Tensor rest_index_;
  int64_t offset_;
  std::vector<int64_t> sizes_;
};

}  // namespace sharding
}  // namespace accel
