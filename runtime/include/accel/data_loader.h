#pragma once

#include <accel/detail/apply_to_tensors.h>
#include <accel/detail/batch_prefetcher.h>
#include <accel/detail/loader_preparation.h>
#include <accel/detail/pass_position.h>
#include <accel/detail/training_links.h>

#include <torch/data/dataloader.h>
#include <torch/data/dataloader_options.h>
#include <torch/data/example.h>
#include <torch/data/samplers/random.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace accel {
namespace detail {

/// The batches process `process_index` reads from an epoch whose samples come in `order`.
/// Without split_batches process r takes the sampler's batches r, r+n, ...; with it, each batch is
/// cut into n equal parts. even_batches completes the last round by cycling from the start.
std::vector<std::vector<size_t>> shard_batches(const std::vector<size_t>& order,
                                               const ShardingOptions& options);

/// Real samples in the last global batch, as gather_for_metrics needs it; -1 with drop_last
/// (no sample is duplicated then).
int64_t sharding_remainder(size_t dataset_size, const ShardingOptions& options);

/// Drains `sampler` for one epoch of `dataset_size` samples, drawing from the default generator
/// as a LibTorch data loader would.
template <typename Sampler>
std::vector<size_t> drain_sampler(Sampler& sampler, size_t dataset_size) {
  static_assert(std::is_same<typename Sampler::BatchRequestType, std::vector<size_t>>::value,
                "accel data loaders shard index-based samplers (batch requests of indices)");
  sampler.reset(dataset_size);
  std::vector<size_t> order;
  order.reserve(dataset_size);
  while (auto chunk = sampler.next(4096)) {
    order.insert(order.end(), chunk->begin(), chunk->end());
  }
  return order;
}

/// One epoch's order shuffled with `seed`, leaving the default generator as it was.
template <typename Sampler>
std::vector<size_t> epoch_order(Sampler& sampler, size_t dataset_size, uint64_t seed) {
  ScopedDefaultGenerator seeded(seed);
  return drain_sampler(sampler, dataset_size);
}

/// One epoch's order drawn from the generator state `state`, leaving the default one as it was.
template <typename Sampler>
std::vector<size_t> epoch_order(Sampler& sampler, size_t dataset_size, const torch::Tensor& state) {
  ScopedDefaultGenerator from(state);
  return drain_sampler(sampler, dataset_size);
}

/// Moves every tensor in a batch to `device`; other values pass through.
template <typename Batch>
Batch to_device(Batch batch, const torch::Device& device) {
  return apply_to_tensors(std::move(batch), [&device](const torch::Tensor& tensor) {
    return tensor.defined() ? tensor.to(device) : tensor;
  });
}

/// The input iterator of a prepared loader: the batch the loader holds now (its `current_`),
/// and its `advance()` to the next; the end is a loader that holds none.
template <typename Loader, typename Batch>
class LoaderIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using pointer = Batch*;
  using reference = Batch&;

  explicit LoaderIterator(Loader* loader) : loader_(loader) {}
  Batch& operator*() { return *loader_->current_; }
  Batch* operator->() { return &*loader_->current_; }
  LoaderIterator& operator++() {
    loader_->advance();
    return *this;
  }
  bool operator==(const LoaderIterator& other) const { return at_end() == other.at_end(); }
  bool operator!=(const LoaderIterator& other) const { return !(*this == other); }

 private:
  bool at_end() const { return loader_ == nullptr || !loader_->current_.has_value(); }
  Loader* loader_;
};

}  // namespace detail

/// A data loader prepared by `Accelerator`: each process reads only its shard of every epoch, and
/// batches arrive on the accelerator's device. Shuffling is the same on every process: by default
/// the order is drawn from the main process's default generator, which advances exactly as under a
/// plain LibTorch loader (so one process reproduces the unprepared program; the other processes'
/// generators advance alike but keep their own streams); with AcceleratorOptions::seed, epoch e
/// shuffles with seed + e and leaves the generators alone. Iterate it as a LibTorch loader:
/// `for (auto& batch : *loader)`.
///
/// With `workers(n)` in its options, n threads read batches ahead (at most `max_jobs`, by default
/// 2n), each from its own copy of the dataset as in LibTorch; batches still arrive in the planned
/// order, so the epoch is the same as with 0 workers. Device placement happens on the calling
/// thread. Without workers, batches are read on the calling thread.
template <typename Dataset, typename Sampler>
class DataLoader : private detail::StatefulPart {
 public:
  using BatchType = typename Dataset::BatchType;

  using Iterator = detail::LoaderIterator<DataLoader, BatchType>;

  DataLoader(Dataset dataset, Sampler sampler, torch::data::FullDataLoaderOptions options,
             detail::LoaderContext context)
      : dataset_(std::move(dataset)),
        sampler_(std::move(sampler)),
        options_(std::move(options)),
        context_(std::move(context)),
        link_(context_.loop, this) {
    TORCH_CHECK(dataset_.size().has_value(),
                "accel: a prepared data loader needs a dataset with a known size");
    context_.sharding.batch_size = options_.batch_size;
    context_.sharding.drop_last = options_.drop_last;
    if (options_.workers > 0) {
      if constexpr (std::is_copy_constructible<Dataset>::value) {
        prefetcher_ = std::make_unique<detail::BatchPrefetcher<Dataset>>(dataset_, options_.workers,
                                                                         options_.max_jobs);
      } else {
        TORCH_CHECK(false, "accel: workers(", options_.workers,
                    ") needs a copyable dataset: each worker reads from its own copy, as in "
                    "LibTorch");
      }
    }
  }

  /// Starts an epoch: plans this process's batches and reads the first.
  Iterator begin() {
    const size_t size = *dataset_.size();
    const auto start = pass_.start_pass(context_);
    plan_ = detail::shard_batches(draw_epoch_order(size, start.resumed), epoch_sharding());
    position_ = std::min(start.skip, plan_.size());
    link_.set_remainder(detail::sharding_remainder(size, epoch_sharding()));
    if (prefetcher_) prefetcher_->start(plan_, position_);
    load_current();
    return Iterator(this);
  }
  Iterator end() { return Iterator(nullptr); }

  /// Batches this process reads in one epoch.
  size_t size() const {
    std::vector<size_t> order(*dataset_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    return detail::shard_batches(order, epoch_sharding()).size();
  }

  /// The epoch the next (or current) iteration reads; it advances when an iteration completes.
  size_t epoch() const { return pass_.epoch(); }
  void set_epoch(size_t epoch) { pass_.set_epoch(epoch); }

  /// The next iteration starts at batch `n` of its epoch (for resuming mid-epoch).
  void skip_first_batches(size_t n) { pass_.skip_first_batches(n); }

  /// Batches consumed so far in the current iteration.
  size_t position() const { return position_; }

  /// Batches of the current epoch already handed out (the one being processed included), or
  /// those a pending skip_first_batches() will skip: where a resumed run continues.
  size_t batches_done() const {
    return current_.has_value() ? position_ + 1 : pass_.pending_skip();
  }

  const Dataset& dataset() const { return dataset_; }
  const torch::data::FullDataLoaderOptions& options() const { return options_; }

 private:
  /// The epoch's order: drawn afresh, or on a pass `resumed` mid-way, the order the saved pass
  /// was drawn with (load_state put the generators back as they were at the save, past that draw).
  std::vector<size_t> draw_epoch_order(size_t size, bool resumed) {
    if (context_.seed) return detail::epoch_order(sampler_, size, *context_.seed + pass_.epoch());
    if (resumed && pass_.generator().defined()) {
      return detail::epoch_order(sampler_, size, pass_.generator());
    }
    const torch::Tensor drawn_from = detail::default_generator_state();
    pass_.set_generator(drawn_from);
    auto order = detail::drain_sampler(sampler_, size);
    // A sampler that drew from the generator shuffles: every process takes the main process's
    // order. (Samplers are alike on every process, so all of them take part or none.)
    if (context_.main_process_state &&
        !torch::equal(detail::default_generator_state(), drawn_from)) {
      const torch::Tensor main_state = context_.main_process_state(drawn_from);
      if (!torch::equal(main_state, drawn_from)) {
        order = detail::epoch_order(sampler_, size, main_state);
        pass_.set_generator(main_state);
      }
    }
    return order;
  }

  /// The sharding of an epoch: even_batches as join_uneven_inputs may have overridden it.
  detail::ShardingOptions epoch_sharding() const {
    auto sharding = context_.sharding;
    if (const auto even_batches = link_.even_batches_override()) {
      sharding.even_batches = *even_batches;
    }
    return sharding;
  }

  void load_current() {
    if (position_ >= plan_.size()) {
      current_.reset();
      link_.set_end_of_dataloader(false);
      link_.set_remainder(-1);
      pass_.finish_pass();
      plan_.clear();
      return;
    }
    link_.set_end_of_dataloader(position_ + 1 == plan_.size());
    BatchType batch =
        prefetcher_ ? prefetcher_->take(position_) : dataset_.get_batch(plan_[position_]);
    if (context_.device_placement) batch = detail::to_device(std::move(batch), context_.device);
    current_ = std::move(batch);
  }
  void advance() {
    ++position_;
    load_current();
  }

  void save_state(torch::serialize::OutputArchive& archive) const override {
    pass_.save(archive, batches_done(), context_.sharding);
  }
  void load_state(torch::serialize::InputArchive& archive) override {
    pass_.load(archive, context_.sharding);
    current_.reset();
    plan_.clear();
  }

  friend Iterator;
  Dataset dataset_;
  Sampler sampler_;
  torch::data::FullDataLoaderOptions options_;
  detail::LoaderContext context_;
  std::vector<std::vector<size_t>> plan_;
  size_t position_ = 0;
  detail::PassPosition pass_{detail::PassPosition::Kind::map_style};
  std::optional<BatchType> current_;
  detail::LoaderLink link_;
  std::unique_ptr<detail::BatchPrefetcher<Dataset>> prefetcher_;  // with workers(n > 0)
};

}  // namespace accel
