// Streamed datasets prepared on 1, 2 and 4 processes (started by accel launch): a ChunkDataset
// over chunk files the test writes, read whole by every process, dispatched from the main one, or
// by chunks per process; a StreamDataset; resuming mid-pass; a chunk that cannot be read.

#include <accel/accel.h>

#include "support/temp_dir.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace datasets = torch::data::datasets;
using torch::data::samplers::RandomSampler;
using torch::data::samplers::SequentialSampler;
using Batch = std::vector<torch::data::Example<>>;
using Ids = std::vector<int64_t>;

// 7 chunks of 5, 6 or 7 examples: 41 in all, so that neither 2 nor 4 processes divide the
// stream's 11 batches of 4.
constexpr size_t kChunks = 7;
constexpr size_t kBatch = 4;
size_t chunk_length(size_t chunk) { return 5 + chunk % 3; }
int64_t first_id(size_t chunk) {
  int64_t id = 0;
  for (size_t c = 0; c < chunk; ++c) id += static_cast<int64_t>(chunk_length(c));
  return id;
}
constexpr int64_t kExamples = 41;

int64_t processes() {
  return std::atoll(std::getenv("WORLD_SIZE") ? std::getenv("WORLD_SIZE") : "1");
}
int64_t rank() { return std::atoll(std::getenv("RANK") ? std::getenv("RANK") : "0"); }

/// This process's copy of the chunk files: chunk c holds the ids of its examples. Written once;
/// removed when the process ends.
fs::path chunk_folder() {
  static const accel_test::TempDir folder("accel_stream_chunks");
  if (!fs::exists(folder / "done")) {
    for (size_t c = 0; c < kChunks; ++c) {
      auto ids = torch::arange(first_id(c), first_id(c) + static_cast<int64_t>(chunk_length(c)));
      torch::save(ids, (folder / ("chunk_" + std::to_string(c) + ".pt")).string());
    }
    std::ofstream(folder / "done") << "ok";
  }
  return folder.path();
}

/// Reads chunk files; counts its reads; chunk `failing` cannot be read.
class FileChunkReader : public datasets::ChunkDataReader<torch::data::Example<>> {
 public:
  explicit FileChunkReader(std::shared_ptr<std::atomic<int>> reads, int64_t failing = -1)
      : folder_(chunk_folder()), reads_(std::move(reads)), failing_(failing) {}
  using Examples = std::vector<torch::data::Example<>>;
  using BatchType = Examples;  // what ChunkDataset reads from its reader
  Examples read_chunk(size_t index) override {
    ++*reads_;
    const auto path = folder_ / ("chunk_" + std::to_string(index) + ".pt");
    if (static_cast<int64_t>(index) == failing_) {
      throw std::runtime_error("chunk " + std::to_string(index) + " (" + path.string() +
                               ") is truncated");
    }
    torch::Tensor ids;
    torch::load(ids, path.string());
    Examples examples;
    for (int64_t i = 0; i < ids.size(0); ++i) {
      examples.push_back({torch::full({2}, ids[i].item<float>()), ids[i]});
    }
    return examples;
  }
  size_t chunk_count() override { return kChunks; }
  void reset() override {}

 private:
  fs::path folder_;
  std::shared_ptr<std::atomic<int>> reads_;
  int64_t failing_;
};

template <typename ChunkSampler>
auto chunks(ChunkSampler sampler, std::shared_ptr<std::atomic<int>> reads, int64_t failing = -1) {
  // One preloader and examples in chunk order: a delivery order that does not depend on timing.
  return datasets::make_shared_dataset<
      datasets::ChunkDataset<FileChunkReader, ChunkSampler, SequentialSampler>>(
      FileChunkReader(std::move(reads), failing), std::move(sampler), SequentialSampler(0),
      datasets::ChunkDatasetOptions(/*preloader_count=*/1, kBatch));
}
auto counter() { return std::make_shared<std::atomic<int>>(0); }

Ids ids_of(const Batch& batch) {
  Ids ids;
  for (const auto& example : batch) ids.push_back(example.target.item<int64_t>());
  return ids;
}
Ids ids_of(const std::vector<int64_t>& batch) { return batch; }

/// The whole stream's batches: ids in order, 4 at a time.
std::vector<Ids> stream_batches() {
  std::vector<Ids> batches;
  for (int64_t id = 0; id < kExamples; id += kBatch) {
    Ids batch;
    for (int64_t i = id; i < std::min<int64_t>(id + kBatch, kExamples); ++i) batch.push_back(i);
    batches.push_back(batch);
  }
  return batches;
}

/// Process p's batches when the stream is shared out in rounds: batch p of each n, the last round
/// completed with the stream's first batches (even_batches).
std::vector<Ids> expected_share(int64_t p, int64_t n) {
  const auto all = stream_batches();
  std::vector<Ids> mine;
  const size_t rounds = (all.size() + n - 1) / n;
  for (size_t r = 0; r < rounds; ++r) {
    const size_t index = r * n + p;
    mine.push_back(index < all.size() ? all[index] : all[index - all.size()]);
  }
  return mine;
}

struct Pass {
  std::vector<Ids> batches;
  std::vector<bool> ends;
  Ids for_metrics;  // gather_for_metrics over the pass: every process's ids, padding dropped
};

template <typename Loader>
Pass read_pass(accel::Accelerator& accelerator, Loader& loader) {
  Pass pass;
  for (auto& batch : loader) {
    pass.batches.push_back(ids_of(batch));
    pass.ends.push_back(accelerator.end_of_dataloader());
    auto ids = torch::tensor(pass.batches.back());
    auto gathered = accelerator.gather_for_metrics(ids, /*use_gather_object=*/true);
    for (int64_t i = 0; i < gathered.size(0); ++i)
      pass.for_metrics.push_back(gathered[i].item<int64_t>());
  }
  return pass;
}

Ids all_ids() {
  Ids ids(kExamples);
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

void expect_last_only(const std::vector<bool>& ends) {
  ASSERT_FALSE(ends.empty());
  for (size_t i = 0; i < ends.size(); ++i) EXPECT_EQ(ends[i], i + 1 == ends.size()) << i;
}

TEST(Streams, EveryProcessReadsTheStreamAndKeepsItsShare) {
  accel::Accelerator accelerator;
  auto reads = counter();
  auto loader = accelerator.prepare_data_loader(chunks(SequentialSampler(0), reads),
                                                accel::StreamLoaderOptions(kBatch));
  for (int epoch = 0; epoch < 2; ++epoch) {
    const Pass pass = read_pass(accelerator, *loader);
    EXPECT_EQ(pass.batches, expected_share(rank(), processes())) << "pass " << epoch;
    expect_last_only(pass.ends);
    Ids metrics = pass.for_metrics;
    std::sort(metrics.begin(), metrics.end());
    EXPECT_EQ(metrics, all_ids()) << "gather_for_metrics keeps every example once";
  }
  EXPECT_EQ(reads->load(), 2 * static_cast<int>(kChunks));
}

TEST(Streams, MakeDataLoadersArgumentsPrepareAStreamToo) {
  // What accel-migrate writes for make_data_loader(chunks, DataLoaderOptions(4)).
  accel::Accelerator accelerator;
  auto loader = accelerator.prepare_data_loader(chunks(SequentialSampler(0), counter()),
                                                torch::data::DataLoaderOptions(kBatch));
  EXPECT_EQ(read_pass(accelerator, *loader).batches, expected_share(rank(), processes()));
  // And a loader already made: prepare(make_data_loader(...)).
  auto taken = accelerator.prepare(torch::data::make_data_loader(
      chunks(SequentialSampler(0), counter()), torch::data::DataLoaderOptions(kBatch)));
  EXPECT_EQ(read_pass(accelerator, *taken).batches, expected_share(rank(), processes()));
  try {
    accelerator.prepare_data_loader(chunks(SequentialSampler(0), counter()),
                                    torch::data::DataLoaderOptions(kBatch).workers(2));
    ADD_FAILURE() << "worker threads over a stream were accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("ask for 2 workers"), std::string::npos);
  }
}

TEST(Streams, SplitBatchesIsRefusedWithWhatToDoInstead) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().split_batches(true));
  try {
    accelerator.prepare_data_loader(chunks(SequentialSampler(0), counter()),
                                    accel::StreamLoaderOptions(kBatch));
    ADD_FAILURE() << "split_batches over a stream was accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("ask the stream for batch_size / num_processes"),
              std::string::npos)
        << error.what();
  }
}

TEST(Streams, DispatchedBatchesAreTheSameAndOnlyTheMainProcessReads) {
  accel::Accelerator accelerator;
  auto reads = counter();
  auto loader =
      accelerator.prepare_data_loader(chunks(SequentialSampler(0), reads),
                                      accel::StreamLoaderOptions(kBatch).dispatch_batches(true));
  const Pass pass = read_pass(accelerator, *loader);
  EXPECT_EQ(pass.batches, expected_share(rank(), processes()));
  expect_last_only(pass.ends);
  EXPECT_EQ(reads->load(), rank() == 0 ? static_cast<int>(kChunks) : 0);
}

TEST(Streams, EachProcessReadsItsOwnChunks) {
  accel::Accelerator accelerator;
  auto reads = counter();
  auto loader = accelerator.prepare_data_loader(chunks(accel::DistributedChunkSampler(0), reads),
                                                accel::StreamLoaderOptions(kBatch));
  const Pass pass = read_pass(accelerator, *loader);
  // Chunk c goes to process c mod n, and no other process reads it.
  const int64_t n = processes();
  int mine = 0;
  for (size_t c = static_cast<size_t>(rank()); c < kChunks; c += n) ++mine;
  EXPECT_EQ(reads->load(), mine);
  // Every process takes the same number of steps; one that runs out first repeats its first
  // batch. Every example is read exactly once apart from those repeats.
  const auto counts = accelerator.gather_object(static_cast<int64_t>(pass.batches.size()));
  EXPECT_TRUE(std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; }));
  expect_last_only(pass.ends);
  std::vector<Ids> distinct;
  for (const auto& batch : pass.batches) {
    if (distinct.empty() || batch != distinct.front()) distinct.push_back(batch);
  }
  Ids seen;
  for (const auto& batch : distinct) seen.insert(seen.end(), batch.begin(), batch.end());
  for (int64_t id : seen) {
    size_t chunk = 0;
    while (first_id(chunk + 1) <= id) ++chunk;
    EXPECT_EQ(static_cast<int64_t>(chunk) % n, rank()) << "id " << id << " of chunk " << chunk;
  }
  auto everyone = accelerator.gather_object(seen);
  std::sort(everyone.begin(), everyone.end());
  EXPECT_EQ(everyone, all_ids());
}

/// A StreamDataset counting up from 0 for ever.
struct Counting : datasets::StreamDataset<Counting, std::vector<int64_t>> {
  std::vector<int64_t> get_batch(size_t size) override {
    std::vector<int64_t> batch(size);
    std::iota(batch.begin(), batch.end(), next);
    next += static_cast<int64_t>(size);
    return batch;
  }
  std::optional<size_t> size() const override { return std::nullopt; }
  int64_t next = 0;
};

TEST(Streams, AStreamDatasetPassIsEpochSizeLong) {
  // A pass is 10 examples.
  accel::Accelerator accelerator;
  auto loader = accelerator.prepare_data_loader(
      Counting(), accel::StreamLoaderOptions(3).epoch_size(10).dispatch_batches(processes() > 1));
  std::vector<std::vector<int64_t>> batches;
  for (auto& batch : *loader) batches.push_back(batch);
  // The stream's batches of a pass: 0-2, 3-5, 6-8, 9; process p takes batch p of each round.
  const std::vector<std::vector<int64_t>> stream = {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}};
  const size_t n = static_cast<size_t>(processes());
  ASSERT_EQ(batches.size(), (stream.size() + n - 1) / n);
  for (size_t r = 0; r < batches.size(); ++r) {
    const size_t index = r * n + static_cast<size_t>(rank());
    EXPECT_EQ(batches[r], stream[index < stream.size() ? index : index - stream.size()]);
  }
}

/// Reads `stop` batches of a pass, saves, then reads on: what a pass resumed from that save must
/// give. A second Accelerator resumes from the save and reads the rest.
template <typename MakeDataset>
void expect_resumed_pass_is_the_same(MakeDataset make, accel::StreamLoaderOptions options) {
  const auto folder =
      fs::path(::testing::TempDir()) /
      ("accel_stream_resume_" +
       std::string(std::getenv("MASTER_PORT") ? std::getenv("MASTER_PORT") : "solo"));
  const size_t stop = 2;
  std::vector<Ids> rest;
  {
    accel::Accelerator accelerator;
    auto loader = accelerator.prepare_data_loader(make(), options);
    (void)read_pass(accelerator, *loader);  // pass 0 in full: the resumed pass is pass 1
    size_t index = 0;
    for (auto& batch : *loader) {
      if (index == stop - 1) accelerator.save_state(folder.string());
      if (index++ >= stop) rest.push_back(ids_of(batch));
    }
  }
  accel::Accelerator accelerator;
  auto loader = accelerator.prepare_data_loader(make(), options);
  accelerator.load_state(folder.string());
  std::vector<Ids> resumed;
  for (auto& batch : *loader) resumed.push_back(ids_of(batch));
  EXPECT_EQ(resumed, rest);
  EXPECT_FALSE(rest.empty());
  EXPECT_EQ(loader->epoch(), 2u);
  // Gone once every process has read it, and before any writes the next save there.
  accelerator.wait_for_everyone();
  if (accelerator.is_main_process()) fs::remove_all(folder);
  accelerator.wait_for_everyone();
}

TEST(Streams, APassResumedFromASaveContinuesBitForBit) {
  // Chunks in a random order drawn as each pass starts: the resumed pass draws the same.
  expect_resumed_pass_is_the_same([] { return chunks(RandomSampler(0), counter()); },
                                  accel::StreamLoaderOptions(kBatch));
  expect_resumed_pass_is_the_same([] { return chunks(RandomSampler(0), counter()); },
                                  accel::StreamLoaderOptions(kBatch).dispatch_batches(true));
  expect_resumed_pass_is_the_same(
      [] { return chunks(accel::DistributedChunkSampler(0, /*shuffle=*/true), counter()); },
      accel::StreamLoaderOptions(kBatch));
  // A StreamDataset cannot be reset: the resumed one reads past the first pass again.
  expect_resumed_pass_is_the_same([] { return Counting(); },
                                  accel::StreamLoaderOptions(2).epoch_size(24));
}

TEST(Streams, AChunkThatCannotBeReadIsNamedAndThePositionKept) {
  for (bool own_chunks : {false, true}) {
    accel::Accelerator accelerator;
    auto fail_on_chunk_3 = [&](auto sampler) {
      return accelerator.prepare_data_loader(chunks(std::move(sampler), counter(), 3),
                                             accel::StreamLoaderOptions(kBatch));
    };
    auto read_until_it_fails = [&](auto& loader) {
      size_t handed_out = 0;
      try {
        for (auto it = loader->begin(); it != loader->end(); ++it)
          handed_out = loader->batches_done();
        ADD_FAILURE() << "the pass ended without the chunk's error";
      } catch (const c10::Error& error) {
        const std::string message = error.what_without_backtrace();
        EXPECT_NE(message.find("chunk 3 ("), std::string::npos) << message;
        EXPECT_NE(message.find(") is truncated"), std::string::npos) << message;
        EXPECT_EQ(loader->batches_done(), handed_out) << "a failed read moved the position";
      }
    };
    if (own_chunks) {
      auto loader = fail_on_chunk_3(accel::DistributedChunkSampler(0));
      read_until_it_fails(loader);
    } else {
      auto loader = fail_on_chunk_3(SequentialSampler(0));
      read_until_it_fails(loader);
    }
  }
}

}  // namespace
