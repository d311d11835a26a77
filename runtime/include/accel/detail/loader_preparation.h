#pragma once

// What Accelerator::prepare needs to build a prepared loader, without the loaders themselves:
// the Accelerator derives from DataLoaderPreparation, and accelerator.h names DataLoader and
// StreamLoader through the declarations here. A program that iterates a prepared loader includes
// accel/data_loader.h or accel/stream_loader.h (accel/accel.h has both).

#include <accel/detail/default_generator.h>
#include <accel/detail/training_links.h>

#include <ATen/core/ivalue.h>
#include <torch/data/dataloader.h>
#include <torch/data/dataloader_options.h>
#include <torch/data/samplers/random.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace accel {

template <typename Dataset, typename Sampler>
class DataLoader;  // accel/data_loader.h
struct StreamLoaderOptions;
template <typename Dataset>
class StreamLoader;  // accel/stream_loader.h

namespace detail {

/// A streamed dataset (LibTorch's StatefulDataset or StreamDataset): asked for a batch size, not
/// for indices. A map-style dataset's requests are indices.
template <typename Dataset, typename = void>
struct IsStreamDataset : std::false_type {};
template <typename Dataset>
struct IsStreamDataset<Dataset, std::void_t<typename Dataset::BatchRequestType>>
    : std::is_same<typename Dataset::BatchRequestType, size_t> {};

/// How one process takes its share of an epoch's batches (Accelerate's BatchSamplerShard).
struct ShardingOptions {
  size_t batch_size = 1;
  bool drop_last = false;
  bool split_batches = false;
  bool even_batches = true;
  int64_t num_processes = 1;
  int64_t process_index = 0;
};

/// What a prepared loader needs from its Accelerator.
struct LoaderContext {
  ShardingOptions sharding;
  /// AcceleratorOptions::seed: epoch e shuffles with seed + e. Without it, the order is drawn
  /// from the default generator, as a plain LibTorch loader does.
  std::optional<uint64_t> seed;
  /// With several processes: returns the main process's value of a generator state (a collective).
  std::function<torch::Tensor(const torch::Tensor&)> main_process_state;
  /// With several processes and AcceleratorOptions::rng_types naming "torch" or "cuda": copies
  /// those generators from the main process (a collective), as each pass starts.
  std::function<void()> synchronize_generators;
  /// With several processes: the main process's `value` on every process (a collective), and
  /// every process's value, in process order. Prepared streams send batches and flags with them.
  std::function<c10::IValue(const c10::IValue&)> broadcast_from_main;
  std::function<std::vector<c10::IValue>(const c10::IValue&)> gather_values;
  torch::Device device = torch::kCPU;
  bool device_placement = true;
  std::shared_ptr<TrainingLoop> loop;
};

/// A prepared loader over `dataset`, in `context` (the accelerator's processes and device).
template <typename Dataset, typename Sampler>
std::unique_ptr<DataLoader<Dataset, Sampler>> make_prepared_loader(
    Dataset dataset, Sampler sampler, torch::data::FullDataLoaderOptions options,
    LoaderContext context) {
  return std::make_unique<DataLoader<Dataset, Sampler>>(std::move(dataset), std::move(sampler),
                                                        std::move(options), std::move(context));
}

/// `make_data_loader`'s choice of sampler: one over the whole dataset.
template <typename Sampler, typename Dataset>
Sampler sampler_for(const Dataset& dataset) {
  TORCH_CHECK(dataset.size().has_value(),
              "accel: prepare_data_loader needs a dataset with a known size");
  return Sampler(*dataset.size());
}

/// The dataset of a loader built by `torch::data::make_data_loader`, moved out of it, and a new
/// sampler of the loader's type over it. A loader with worker threads is refused: its workers hold
/// the only copies of the dataset.
template <typename Dataset, typename Sampler>
std::pair<Dataset, Sampler> take_over(torch::data::StatelessDataLoader<Dataset, Sampler>& loader) {
  static_assert(std::is_constructible<Sampler, size_t>::value,
                "this sampler cannot be rebuilt from the dataset size; use "
                "accelerator.prepare_data_loader(dataset, sampler, options)");
  // main_thread_dataset_ is protected in DataLoaderBase; a pointer-to-member formed in a derived
  // class reaches it without copying the dataset.
  struct Access : torch::data::StatelessDataLoader<Dataset, Sampler> {
    static std::unique_ptr<Dataset>& dataset(
        torch::data::StatelessDataLoader<Dataset, Sampler>& l) {
      return l.*(&Access::main_thread_dataset_);
    }
  };
  auto& dataset = Access::dataset(loader);
  TORCH_CHECK(dataset != nullptr,
              "accel: prepare(data loader) cannot take over a loader with worker threads "
              "(workers > 0); use accelerator.prepare_data_loader(dataset, options) instead");
  Dataset taken = std::move(*dataset);
  const size_t size = *taken.size();
  // The loader's own sampler already drew its first permutation (LibTorch's RandomSampler does at
  // construction); its replacement must not draw another, or the program's later random numbers
  // would differ from the unprepared program's.
  std::optional<Sampler> sampler;
  {
    ScopedDefaultGenerator unchanged(default_generator_state());
    sampler.emplace(size);
  }
  return {std::move(taken), std::move(*sampler)};
}

/// The streamed dataset of a loader built by `torch::data::make_data_loader`, moved out of it. A
/// loader with worker threads is refused: they were made to read that dataset.
template <typename Dataset>
Dataset take_over(torch::data::StatefulDataLoader<Dataset>& loader) {
  TORCH_CHECK(loader.options().workers == 0,
              "accel: a prepared stream is read on the calling thread, and this loader has ",
              loader.options().workers,
              " workers; make it without them (a ChunkDataset reads ahead with its "
              "preloader_count)");
  struct Access : torch::data::StatefulDataLoader<Dataset> {
    static std::unique_ptr<Dataset>& dataset(torch::data::StatefulDataLoader<Dataset>& l) {
      return l.*(&Access::main_thread_dataset_);
    }
  };
  return std::move(*Access::dataset(loader));
}

/// Accelerator derives from DataLoaderPreparation<Accelerator>: the ways to build a prepared
/// loader from a dataset, all ending in the Accelerator's loader_context().
template <typename Derived>
class DataLoaderPreparation {
 public:
  /// Prepares a loader made by `torch::data::make_data_loader` (with no worker threads: those
  /// hold the only copies of the dataset): the dataset is taken over and each process reads only
  /// its shard.
  template <typename Dataset, typename Sampler>
  std::unique_ptr<DataLoader<Dataset, Sampler>> prepare(
      std::unique_ptr<torch::data::StatelessDataLoader<Dataset, Sampler>> loader) {
    TORCH_CHECK(loader != nullptr, "accel: prepare() was given an empty data loader");
    auto [dataset, sampler] = take_over(*loader);
    return prepare_data_loader(std::move(dataset), std::move(sampler), loader->options());
  }
  /// Prepares a streamed dataset's loader made by `make_data_loader` (a ChunkDataset's, with no
  /// worker threads): the dataset is taken over and read as accel/stream_loader.h says.
  template <typename Dataset>
  std::unique_ptr<StreamLoader<Dataset>> prepare(
      std::unique_ptr<torch::data::StatefulDataLoader<Dataset>> loader) {
    TORCH_CHECK(loader != nullptr, "accel: prepare() was given an empty data loader");
    const size_t batch_size = loader->options().batch_size;
    return prepare_data_loader(take_over(*loader), StreamOptions<Dataset>(batch_size));
  }

  /// Builds a prepared loader with `make_data_loader`'s arguments.
  template <typename Sampler = torch::data::samplers::RandomSampler, typename Dataset,
            std::enable_if_t<!IsStreamDataset<Dataset>::value, int> = 0>
  std::unique_ptr<DataLoader<Dataset, Sampler>> prepare_data_loader(
      Dataset dataset, torch::data::DataLoaderOptions options) {
    auto sampler = sampler_for<Sampler>(dataset);
    return prepare_data_loader(std::move(dataset), std::move(sampler), std::move(options));
  }
  template <typename Sampler = torch::data::samplers::RandomSampler, typename Dataset,
            std::enable_if_t<!IsStreamDataset<Dataset>::value, int> = 0>
  std::unique_ptr<DataLoader<Dataset, Sampler>> prepare_data_loader(Dataset dataset,
                                                                    size_t batch_size) {
    return prepare_data_loader<Sampler>(std::move(dataset),
                                        torch::data::DataLoaderOptions(batch_size));
  }
  /// A streamed dataset with `make_data_loader`'s arguments (what accel-migrate writes for a
  /// ChunkDataset's loader): the batch size is the options'; the stream is read on the calling
  /// thread, so the options may not ask for worker threads (a ChunkDataset has its preloaders).
  template <typename Dataset, std::enable_if_t<IsStreamDataset<Dataset>::value, int> = 0>
  auto prepare_data_loader(Dataset dataset, torch::data::DataLoaderOptions options) {
    const torch::data::FullDataLoaderOptions full(options);
    TORCH_CHECK(full.workers == 0, "accel: a prepared stream is read on the calling thread; its ",
                "DataLoaderOptions ask for ", full.workers,
                " workers (a ChunkDataset reads ahead with its preloader_count)");
    return prepare_data_loader(std::move(dataset), StreamOptions<Dataset>(full.batch_size));
  }
  template <typename Dataset, std::enable_if_t<IsStreamDataset<Dataset>::value, int> = 0>
  auto prepare_data_loader(Dataset dataset, size_t batch_size) {
    return prepare_data_loader(std::move(dataset), StreamOptions<Dataset>(batch_size));
  }
  template <typename Dataset, typename Sampler>
  std::unique_ptr<DataLoader<Dataset, Sampler>> prepare_data_loader(
      Dataset dataset, Sampler sampler, torch::data::DataLoaderOptions options) {
    return prepare_data_loader(std::move(dataset), std::move(sampler),
                               torch::data::FullDataLoaderOptions(std::move(options)));
  }
  template <typename Dataset, typename Sampler>
  std::unique_ptr<DataLoader<Dataset, Sampler>> prepare_data_loader(
      Dataset dataset, Sampler sampler, torch::data::FullDataLoaderOptions options) {
    auto context = static_cast<Derived&>(*this).loader_context(options.batch_size);
    return make_prepared_loader(std::move(dataset), std::move(sampler), std::move(options),
                                std::move(context));
  }
  /// Prepares a streamed dataset: a StatefulDataset (a ChunkDataset from make_shared_dataset, or
  /// the program's own) or a StreamDataset (see accel/stream_loader.h).
  template <typename Dataset, typename Options,  // Options: StreamLoaderOptions, defined there
            std::enable_if_t<std::is_same<Options, StreamLoaderOptions>::value, int> = 0>
  std::unique_ptr<StreamLoader<Dataset>> prepare_data_loader(Dataset dataset, Options options) {
    static_assert(IsStreamDataset<Dataset>::value,
                  "StreamLoaderOptions (and dispatch_batches) are for streamed datasets, asked for "
                  "a batch size: ChunkDataset, a StatefulDataset or a StreamDataset. A map-style "
                  "dataset is shared out by its sampler: prepare_data_loader(dataset, batch_size)");
    auto context = static_cast<Derived&>(*this).loader_context(options.batch_size());
    return std::make_unique<StreamLoader<Dataset>>(std::move(dataset), std::move(options),
                                                   std::move(context));
  }

 protected:
  DataLoaderPreparation() = default;

 private:
  // StreamLoaderOptions, named through the dataset's type so that it is looked up when a stream
  // is prepared, where accel/stream_loader.h has defined it.
  template <typename Dataset>
  using StreamOptions = std::conditional_t<sizeof(Dataset) != 0, StreamLoaderOptions, void>;
};

}  // namespace detail
}  // namespace accel
