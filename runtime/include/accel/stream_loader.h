#pragma once

// Streamed data, prepared: LibTorch's StatefulDataset (ChunkDataset and the program's own) and
// StreamDataset, the C++ forms of PyTorch's IterableDataset, shared among the processes as
// Accelerate shares an IterableDataset (IterableDatasetShard, dispatch_batches).
//
//   auto chunks = torch::data::datasets::make_shared_dataset<ChunkDataset<Reader>>(...);
//   auto loader = accelerator.prepare_data_loader(chunks, accel::StreamLoaderOptions(32));
//   for (auto& batch : *loader) { ... }
//
// A pass over the stream is read in rounds; each round gives every process one batch:
//   - by default every process reads the whole stream and keeps batch p of every n consecutive
//     ones (Accelerate's IterableDatasetShard): right for any stream, at n times the reading;
//   - with dispatch_batches(true) the main process alone reads, and sends every process the round's
//     batches (Accelerate's dispatch_batches); the others never touch their dataset;
//   - a ChunkDataset whose chunk sampler is accel::DistributedChunkSampler reads only this
//     process's chunks (chunk i of the pass to process i mod n): accel sets the sampler's process
//     count and index. Processes' streams then differ in length; a small all-gather per round
//     keeps them in step. (LibTorch's DistributedRandomSampler and DistributedSequentialSampler
//     repeat or drop chunks when n does not divide their number, so they are read as any stream.)
// With even_batches (the default) the last round is completed with batches from the start of the
// pass, as Accelerate does; without it, a process with nothing left in the last round stops there
// (per-process chunks: every process stops when the first runs out).
//
// save_state / load_state record the pass and the rounds done; a resumed pass reads the stream
// again from its start and skips those rounds, so it continues bit for bit when the stream
// delivers in a fixed order. A ChunkDataset does with preloader_count(1) and a SequentialSampler
// over each chunk's examples; its chunk order may be random (drawn when the pass starts, from the
// generator state load_state restores). Several preloaders, or a random example sampler (drawn on
// a preloader thread), make the order depend on thread timing.

#include <accel/data_loader.h>
#include <accel/detail/pass_position.h>

#include <ATen/core/ivalue.h>
#include <torch/arg.h>
#include <torch/data/datasets/chunk.h>
#include <torch/data/datasets/shared.h>
#include <torch/data/datasets/stateful.h>
#include <torch/data/example.h>
#include <torch/data/samplers/distributed.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace accel {

/// How a prepared stream is read (see the top of this header).
struct StreamLoaderOptions {
  /// `batch_size`: what each process asks the dataset for, and gets, per step. A ChunkDataset's
  /// own options().batch_size() must be the same.
  explicit StreamLoaderOptions(size_t batch_size) : batch_size_(batch_size) {}
  TORCH_ARG(size_t, batch_size);
  /// The main process reads and sends every process its batch (Accelerate's dispatch_batches).
  /// Batches are sent pickled: tensors, Examples of tensors, numbers, strings and vectors of them.
  TORCH_ARG(bool, dispatch_batches) = false;
  /// A StreamDataset's examples in one pass (StreamSampler's epoch_size); unset, a pass ends when
  /// the dataset returns an empty batch. A StatefulDataset ends its own passes.
  TORCH_ARG(std::optional<size_t>, epoch_size) = std::nullopt;
};

/// A ChunkDataset's chunk sampler that gives each process its own chunks, every chunk once per
/// pass: chunk i of the pass's order goes to process i mod n (the last chunks to the first
/// processes). A prepared stream sets the process count and index; the order is the chunks' own,
/// or with `shuffle`, a permutation drawn from the pass number (set_epoch), the same on every
/// process. Use it as ChunkDataset's ChunkSampler for per-process reading:
///   ChunkDataset<Reader, accel::DistributedChunkSampler, SequentialSampler>(
///       reader, accel::DistributedChunkSampler(0), SequentialSampler(0), options)
class DistributedChunkSampler : public torch::data::samplers::DistributedSampler<> {
 public:
  explicit DistributedChunkSampler(size_t size, bool shuffle = false)
      : DistributedSampler(size), shuffle_(shuffle) {}

  /// Which of `processes` this sampler serves; the next reset() applies it.
  void set_processes(size_t processes, size_t index) {
    num_replicas_ = processes;
    rank_ = index;
  }

  void reset(std::optional<size_t> new_size = std::nullopt) override {
    if (new_size) size_ = *new_size;
    std::vector<size_t> order(size_);
    for (size_t i = 0; i < size_; ++i) order[i] = i;
    if (shuffle_) std::shuffle(order.begin(), order.end(), std::mt19937_64(epoch_));
    mine_.clear();
    for (size_t i = rank_; i < size_; i += num_replicas_) mine_.push_back(order[i]);
    next_ = 0;
  }

  std::optional<std::vector<size_t>> next(size_t count) override {
    if (next_ >= mine_.size()) return std::nullopt;
    const size_t end = std::min(mine_.size(), next_ + count);
    std::vector<size_t> chunks(mine_.begin() + static_cast<std::ptrdiff_t>(next_),
                               mine_.begin() + static_cast<std::ptrdiff_t>(end));
    next_ = end;
    return chunks;
  }

  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("next", torch::tensor(static_cast<int64_t>(next_)));
  }
  void load(torch::serialize::InputArchive& archive) override {
    next_ = static_cast<size_t>(detail::read_count(archive, "next"));
  }

 private:
  bool shuffle_;
  std::vector<size_t> mine_;  // this process's chunks of the pass, in order
  size_t next_ = 0;
};

namespace detail {

template <typename T>
struct IsOptional : std::false_type {
  using Inner = T;
};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {
  using Inner = T;
};

/// A ChunkDataset, held as make_shared_dataset gives it (a ChunkDataset cannot be moved).
template <typename T>
struct IsChunkDataset : std::false_type {};
template <typename Reader, typename ChunkSampler, typename ExampleSampler>
struct IsChunkDataset<torch::data::datasets::SharedBatchDataset<
    torch::data::datasets::ChunkDataset<Reader, ChunkSampler, ExampleSampler>>> : std::true_type {
  using ChunkSamplerType = ChunkSampler;
};

/// True for a ChunkDataset whose chunks are sampled by DistributedChunkSampler.
template <typename Dataset, typename = void>
struct ReadsChunksPerProcess : std::false_type {};
template <typename Dataset>
struct ReadsChunksPerProcess<Dataset, std::enable_if_t<IsChunkDataset<Dataset>::value>>
    : std::is_base_of<DistributedChunkSampler, typename IsChunkDataset<Dataset>::ChunkSamplerType> {
};

/// What one get_batch returns: a StatefulDataset's optional batch, or a StreamDataset's batch.
template <typename Dataset>
using RawStreamBatch = std::decay_t<decltype(std::declval<Dataset&>().get_batch(size_t{1}))>;

/// How many examples a batch holds: a vector's size, a tensor's or an Example's first dimension.
template <typename T>
size_t batch_length(const T& batch) {
  if constexpr (std::is_same<T, at::Tensor>::value) {
    return batch.dim() == 0 ? 1 : static_cast<size_t>(batch.size(0));
  } else if constexpr (std::is_same<T, torch::data::Example<>>::value) {
    return batch_length(batch.data);
  } else if constexpr (std::is_same<T, torch::data::TensorExample>::value) {
    return batch_length(batch.data);
  } else {
    return batch.size();
  }
}

/// Batches to and from c10::IValue, to be pickled for dispatch_batches.
template <typename T>
c10::IValue to_ivalue(const T& value) {
  if constexpr (std::is_same<T, torch::data::Example<>>::value) {
    return c10::ivalue::Tuple::create({value.data, value.target});
  } else if constexpr (std::is_same<T, torch::data::TensorExample>::value) {
    return value.data;
  } else if constexpr (std::is_same<T, at::Tensor>::value || std::is_arithmetic<T>::value ||
                       std::is_same<T, std::string>::value) {
    return c10::IValue(value);
  } else {
    c10::impl::GenericList list(c10::AnyType::get());
    for (const auto& element : value) list.push_back(to_ivalue(element));
    return list;
  }
}
template <typename T>
T from_ivalue(const c10::IValue& value) {
  if constexpr (std::is_same<T, torch::data::Example<>>::value) {
    const auto& elements = value.toTupleRef().elements();
    return {elements[0].toTensor(), elements[1].toTensor()};
  } else if constexpr (std::is_same<T, torch::data::TensorExample>::value) {
    return T(value.toTensor());
  } else if constexpr (std::is_same<T, at::Tensor>::value) {
    return value.toTensor();
  } else if constexpr (std::is_arithmetic<T>::value || std::is_same<T, std::string>::value) {
    return value.to<T>();
  } else {
    T out;
    for (const auto& element : value.toListRef()) {
      out.push_back(from_ivalue<typename T::value_type>(element));
    }
    return out;
  }
}

}  // namespace detail

/// A streamed dataset prepared by `Accelerator::prepare_data_loader(dataset,
/// StreamLoaderOptions)`: iterate it as a LibTorch loader; each batch is this process's, on the
/// accelerator's device.
template <typename Dataset>
class StreamLoader : private detail::StatefulPart {
 public:
  using BatchType = typename detail::IsOptional<detail::RawStreamBatch<Dataset>>::Inner;
  /// A StatefulDataset (reset() starts a pass, an empty optional ends it), else a StreamDataset.
  static constexpr bool kStateful = detail::IsOptional<detail::RawStreamBatch<Dataset>>::value;

  using Iterator = detail::LoaderIterator<StreamLoader, BatchType>;

  StreamLoader(Dataset dataset, StreamLoaderOptions options, detail::LoaderContext context)
      : dataset_(std::move(dataset)),
        options_(std::move(options)),
        context_(std::move(context)),
        link_(context_.loop, this) {
    TORCH_CHECK(options_.batch_size() > 0, "accel: StreamLoaderOptions::batch_size must be > 0");
    TORCH_CHECK(!context_.sharding.split_batches,
                "accel: split_batches is set, and a prepared stream gives each process whole "
                "batches of batch_size (",
                options_.batch_size(),
                "); to split each global batch, ask the stream for batch_size / num_processes");
    const int64_t processes = context_.sharding.num_processes;
    if (options_.dispatch_batches()) {
      mode_ = Mode::dispatch;
    } else if constexpr (detail::ReadsChunksPerProcess<Dataset>::value) {
      mode_ = Mode::per_process;
      dataset_->chunk_sampler().set_processes(static_cast<size_t>(processes),
                                              static_cast<size_t>(context_.sharding.process_index));
    }
    if (processes == 1) mode_ = Mode::alone;
  }

  Iterator begin() {
    const size_t skip = start_pass();
    for (size_t i = 0; i < skip && read_round(); ++i) {
    }
    rounds_done_ = skip;
    // Both reads before anything changes: a read that fails leaves the position where it was.
    auto first = read_round();
    auto second = first ? read_round() : std::nullopt;
    current_ = std::move(first);
    pending_ = std::move(second);
    publish();
    return Iterator(this);
  }
  Iterator end() { return Iterator(nullptr); }

  /// The pass the next (or current) iteration reads; it advances when an iteration completes.
  size_t epoch() const { return pass_.epoch(); }
  void set_epoch(size_t epoch) { pass_.set_epoch(epoch); }
  /// The next pass starts at this process's batch `n` (for resuming mid-pass).
  void skip_first_batches(size_t n) { pass_.skip_first_batches(n); }
  /// Batches of the current pass already handed out to this process (the current one included).
  size_t batches_done() const {
    return current_.has_value() ? rounds_done_ + 1 : pass_.pending_skip();
  }
  Dataset& dataset() { return dataset_; }

 private:
  enum class Mode { alone, slices, dispatch, per_process };
  struct Round {
    std::optional<BatchType> mine;
    /// Examples in the round's batches that are real, when the round was completed with batches
    /// from the start of the pass; -1 otherwise.
    int64_t real_examples = -1;
  };

  /// Resets a StatefulDataset, drawing its chunk order from the generator state every process
  /// shares: the seed's, the saved one on a resumed pass, or the main process's. Returns the
  /// batches the pass skips.
  size_t start_pass() {
    examples_this_pass_ = 0;
    last_real_examples_ = -1;
    first_batches_.clear();
    const auto start = pass_.start_pass(context_);
    const size_t epoch = pass_.epoch();
    // Dispatched: only the main process reads, so only its dataset starts a pass.
    if (mode_ == Mode::dispatch && context_.sharding.process_index != 0) return start.skip;
    if constexpr (!kStateful) {
      // A StreamDataset has no reset: a fresh one starts at its first example, so a loaded state
      // first reads past the passes that were done before it.
      if (start.loaded && options_.epoch_size()) {
        for (size_t pass = 0; pass < epoch; ++pass) {
          while (read_one()) {
          }
          examples_this_pass_ = 0;
        }
      }
    }
    if constexpr (kStateful) {
      if constexpr (detail::ReadsChunksPerProcess<Dataset>::value) {
        dataset_->chunk_sampler().set_epoch(context_.seed ? *context_.seed + epoch : epoch);
      }
      torch::Tensor state;
      if (start.resumed && pass_.generator().defined()) {
        state = pass_.generator();
      } else if (context_.seed) {
        detail::ScopedDefaultGenerator seeded(*context_.seed + epoch);
        state = detail::default_generator_state();
      } else if (mode_ == Mode::slices && context_.main_process_state) {
        state = context_.main_process_state(detail::default_generator_state());
      }
      // Without a shared state the pass draws from this process's own generator, advancing it
      // as a plain LibTorch loader would; the state it drew from is kept for a resume.
      pass_.set_generator(state.defined() ? state : detail::default_generator_state());
      std::optional<detail::ScopedDefaultGenerator> shared;
      if (state.defined()) shared.emplace(state);
      dataset_.reset();
    }
    return start.skip;
  }

  /// One get_batch of this process's dataset; none at the end of the pass. A failure is rethrown
  /// naming where the stream was, which stays at the last batch handed out.
  std::optional<BatchType> read_one() {
    try {
      if constexpr (kStateful) {
        auto batch = dataset_.get_batch(options_.batch_size());
        if (!batch) return std::nullopt;
        return BatchType(std::move(*batch));
      } else {
        size_t wanted = options_.batch_size();
        if (options_.epoch_size()) {
          if (examples_this_pass_ >= *options_.epoch_size()) return std::nullopt;
          wanted = std::min(wanted, *options_.epoch_size() - examples_this_pass_);
        }
        BatchType batch = dataset_.get_batch(wanted);
        const size_t length = detail::batch_length(batch);
        if (length == 0) return std::nullopt;
        examples_this_pass_ += length;
        return batch;
      }
    } catch (const c10::Error& error) {
      TORCH_CHECK(false, "accel: reading the prepared stream failed (pass ", pass_.epoch(),
                  ", after this process's batch ", rounds_done_,
                  "): ", error.what_without_backtrace());
    } catch (const std::exception& error) {
      TORCH_CHECK(false, "accel: reading the prepared stream failed (pass ", pass_.epoch(),
                  ", after this process's batch ", rounds_done_, "): ", error.what());
    }
    return std::nullopt;  // not reached
  }

  /// Up to n consecutive batches of the stream (a round's); empty at the end of the pass.
  std::vector<BatchType> read_group() {
    std::vector<BatchType> group;
    const auto n = static_cast<size_t>(context_.sharding.num_processes);
    while (group.size() < n) {
      auto batch = read_one();
      if (!batch) break;
      group.push_back(std::move(*batch));
    }
    return group;
  }

  /// The dispatching process's group, sent to every process: a list of batches, or the text of
  /// the main process's failure, so that no process waits for a group that will not come.
  std::vector<BatchType> dispatched_group() {
    c10::IValue message;
    std::vector<BatchType> group;
    if (context_.sharding.process_index == 0) {
      try {
        group = read_group();
        message = detail::to_ivalue(group);
      } catch (const c10::Error& error) {
        message = c10::IValue(std::string(error.what_without_backtrace()));
      }
    }
    message = context_.broadcast_from_main(message);
    TORCH_CHECK(
        !message.isString(),
        "accel: the main process could not read the dispatched stream: ", message.toStringRef());
    if (context_.sharding.process_index != 0) {
      group = detail::from_ivalue<std::vector<BatchType>>(message);
    }
    return group;
  }

  /// This process's batch of the next round; none when the pass has ended for it.
  std::optional<BatchType> read_round() {
    Round round;
    switch (mode_) {
      case Mode::alone:
        round.mine = read_one();
        break;
      case Mode::slices:
      case Mode::dispatch:
        round = round_of(mode_ == Mode::dispatch ? dispatched_group() : read_group());
        break;
      case Mode::per_process:
        round = per_process_round();
        break;
    }
    if (round.mine && round.real_examples >= 0) last_real_examples_ = round.real_examples;
    return std::move(round.mine);
  }

  /// Process p's share of a group of the stream's batches.
  Round round_of(std::vector<BatchType> group) {
    const auto n = static_cast<size_t>(context_.sharding.num_processes);
    const auto p = static_cast<size_t>(context_.sharding.process_index);
    Round round;
    if (group.empty()) return round;
    // The pass's first batches complete its last round (even_batches).
    for (size_t i = 0; i < group.size() && first_batches_.size() < n; ++i) {
      first_batches_.push_back(group[i]);
    }
    if (group.size() == n) {
      round.mine = std::move(group[p]);
      return round;
    }
    if (!context_.sharding.even_batches && p >= group.size()) return round;
    int64_t real = 0;
    for (const auto& batch : group) real += static_cast<int64_t>(detail::batch_length(batch));
    round.real_examples = real;
    round.mine = p < group.size() ? std::move(group[p])
                                  : first_batches_[(p - group.size()) % first_batches_.size()];
    return round;
  }

  /// Per-process chunks: read this process's next batch, and learn whether every process has one.
  Round per_process_round() {
    Round round;
    std::optional<BatchType> mine;
    std::string failure;
    try {
      mine = read_one();
    } catch (const c10::Error& error) {  // read_one's errors are c10::Errors
      failure = error.what_without_backtrace();
    }
    // Each process says whether it has a batch, or why it failed.
    const auto said = context_.gather_values(failure.empty() ? c10::IValue(mine.has_value())
                                                             : c10::IValue(failure));
    size_t with = 0;
    for (size_t i = 0; i < said.size(); ++i) {
      TORCH_CHECK(!said[i].isString(), "accel: process ", i,
                  " could not read its chunks of the prepared stream: ", said[i].toStringRef());
      with += said[i].toBool() ? 1 : 0;
    }
    if (with == said.size()) {
      if (first_batches_.empty()) first_batches_.push_back(*mine);
      round.mine = std::move(mine);
    } else if (with > 0 && context_.sharding.even_batches) {
      // Some processes' chunks ran out first: they repeat their first batch of the pass.
      if (mine) {
        round.mine = std::move(mine);
      } else {
        TORCH_CHECK(!first_batches_.empty(), "accel: process ", context_.sharding.process_index,
                    " read nothing in pass ", pass_.epoch(),
                    " of the prepared stream while others did; give it more chunks than "
                    "processes");
        round.mine = first_batches_.front();
      }
    }
    return round;
  }

  /// Tells the training loop whether this is the pass's last batch, and how many of the last
  /// round's examples are real (gather_for_metrics drops the rest).
  void publish() {
    if (!current_) {
      link_.set_end_of_dataloader(false);
      link_.set_remainder(-1);
      pass_.finish_pass();
      return;
    }
    link_.set_end_of_dataloader(!pending_.has_value());
    link_.set_remainder(pending_.has_value() ? -1 : last_real_examples_);
    if (context_.device_placement) {
      *current_ = detail::to_device(std::move(*current_), context_.device);
    }
  }

  void advance() {
    // The read ahead first: if it fails, the loop still holds the batch it had.
    auto next = pending_ ? read_round() : std::nullopt;
    ++rounds_done_;
    current_ = std::move(pending_);
    pending_ = std::move(next);
    publish();
  }

  void save_state(torch::serialize::OutputArchive& archive) const override {
    pass_.save(archive, batches_done(), context_.sharding);
  }
  void load_state(torch::serialize::InputArchive& archive) override {
    pass_.load(archive, context_.sharding);
    current_.reset();
    pending_.reset();
  }

  friend Iterator;
  Dataset dataset_;
  StreamLoaderOptions options_;
  detail::LoaderContext context_;
  Mode mode_ = Mode::slices;
  std::optional<BatchType> current_;
  std::optional<BatchType> pending_;  // read ahead, so that the last batch is known as such
  std::vector<BatchType> first_batches_;
  detail::PassPosition pass_{detail::PassPosition::Kind::stream};
  size_t rounds_done_ = 0;
  size_t examples_this_pass_ = 0;
  int64_t last_real_examples_ = -1;
  detail::LoaderLink link_;
};

}  // namespace accel
