// The batches each process reads, checked against the expectations Accelerate's own tests state
// for BatchSamplerShard (2 processes).

#include <accel/data_loader.h>
#include <accel/operations.h>

#include <gtest/gtest.h>

#include <numeric>

namespace accel {
namespace detail {
namespace {

using Batches = std::vector<std::vector<size_t>>;

Batches shard(size_t dataset_size, size_t batch_size, int64_t rank, bool even = true,
              bool split = false, bool drop_last = false, int64_t processes = 2) {
  std::vector<size_t> order(dataset_size);
  std::iota(order.begin(), order.end(), 0);
  ShardingOptions options;
  options.batch_size = batch_size;
  options.drop_last = drop_last;
  options.split_batches = split;
  options.even_batches = even;
  options.num_processes = processes;
  options.process_index = rank;
  return shard_batches(order, options);
}

TEST(ShardBatches, EvenDivisionGivesAlternatingBatches) {
  EXPECT_EQ(shard(24, 3, 0), (Batches{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}));
  EXPECT_EQ(shard(24, 3, 1), (Batches{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}}));
}

TEST(ShardBatches, EvenBatchesCompleteTheLastBatchFromTheStart) {
  EXPECT_EQ(shard(22, 3, 0).back(), (std::vector<size_t>{18, 19, 20}));
  EXPECT_EQ(shard(22, 3, 1).back(), (std::vector<size_t>{21, 0, 1}));
  EXPECT_EQ(shard(22, 3, 0).size(), shard(22, 3, 1).size());
}

TEST(ShardBatches, EvenBatchesAddAWholeBatchWhenOneIsMissing) {
  EXPECT_EQ(shard(20, 3, 0).back(), (std::vector<size_t>{18, 19, 0}));
  EXPECT_EQ(shard(20, 3, 1).back(), (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(shard(20, 3, 0).size(), 4u);
  EXPECT_EQ(shard(20, 3, 1).size(), 4u);
}

TEST(ShardBatches, EvenBatchesCycleATinyDataset) {
  EXPECT_EQ(shard(2, 3, 0), (Batches{{0, 1, 0}}));
  EXPECT_EQ(shard(2, 3, 1), (Batches{{1, 0, 1}}));
}

TEST(ShardBatches, UnevenBatchesKeepTheRealTail) {
  EXPECT_EQ(shard(22, 3, 0, /*even=*/false).back(), (std::vector<size_t>{18, 19, 20}));
  EXPECT_EQ(shard(22, 3, 1, /*even=*/false).back(), (std::vector<size_t>{21}));
  EXPECT_EQ(shard(2, 3, 0, /*even=*/false), (Batches{{0, 1}}));
  EXPECT_EQ(shard(2, 3, 1, /*even=*/false), (Batches{}));
}

TEST(ShardBatches, SplitBatchesCutEachGlobalBatch) {
  auto rank0 = shard(24, 4, 0, true, /*split=*/true);
  auto rank1 = shard(24, 4, 1, true, /*split=*/true);
  ASSERT_EQ(rank0.size(), 6u);
  EXPECT_EQ(rank0[0], (std::vector<size_t>{0, 1}));
  EXPECT_EQ(rank0[1], (std::vector<size_t>{4, 5}));
  EXPECT_EQ(rank1[0], (std::vector<size_t>{2, 3}));
  EXPECT_EQ(rank1[5], (std::vector<size_t>{22, 23}));
}

TEST(ShardBatches, SplitBatchesCompleteTheLastGlobalBatch) {
  EXPECT_EQ(shard(21, 4, 0, true, true).back(), (std::vector<size_t>{20, 0}));
  EXPECT_EQ(shard(21, 4, 1, true, true).back(), (std::vector<size_t>{1, 2}));
}

TEST(ShardBatches, SplitBatchesNeedADivisibleBatchSize) {
  EXPECT_THROW(shard(24, 3, 0, true, true), c10::Error);
}

TEST(ShardBatches, DropLastDropsIncompleteRounds) {
  // 22 samples, batch 3: 7 full batches; the 4th round has one of them only and is dropped.
  EXPECT_EQ(shard(22, 3, 0, true, false, /*drop_last=*/true).size(), 3u);
  EXPECT_EQ(shard(22, 3, 1, true, false, /*drop_last=*/true).size(), 3u);
  EXPECT_EQ(sharding_remainder(22, ShardingOptions{3, true, false, true, 2, 0}), -1);
}

TEST(ShardBatches, OneProcessReadsThePlainBatches) {
  EXPECT_EQ(shard(7, 3, 0, true, false, false, /*processes=*/1),
            (Batches{{0, 1, 2}, {3, 4, 5}, {6}}));
}

TEST(ShardBatches, EveryProcessSeesEverySampleOnce) {
  for (size_t size : {1u, 5u, 17u, 64u, 100u}) {
    for (size_t batch : {1u, 3u, 8u}) {
      std::vector<int> seen(size, 0);
      for (int64_t rank = 0; rank < 3; ++rank) {
        for (const auto& b : shard(size, batch, rank, /*even=*/false, false, false, 3)) {
          for (size_t i : b) ++seen[i];
        }
      }
      for (size_t i = 0; i < size; ++i) EXPECT_EQ(seen[i], 1) << size << "/" << batch << "/" << i;
    }
  }
}

TEST(ShardBatches, RemainderCountsRealSamplesOfTheLastGlobalBatch) {
  EXPECT_EQ(sharding_remainder(9, ShardingOptions{5, false, false, true, 2, 0}), 9);
  EXPECT_EQ(sharding_remainder(20, ShardingOptions{3, false, false, true, 2, 0}), 2);
  EXPECT_EQ(sharding_remainder(21, ShardingOptions{4, false, true, true, 2, 0}), 1);
}

TEST(SplitRange, SeventeenItemsOnTwoProcesses) {
  auto r0 = split_range(17, 2, 0, false);
  auto r1 = split_range(17, 2, 1, false);
  EXPECT_EQ(r0.begin, 0u);
  EXPECT_EQ(r0.end, 9u);
  EXPECT_EQ(r1.begin, 9u);
  EXPECT_EQ(r1.end, 17u);
  EXPECT_EQ(split_range(17, 2, 1, true).padded_size, 9u);
  EXPECT_EQ(split_range(16, 2, 1, true).padded_size, 8u);
}

TEST(EpochOrder, SameSeedSameOrderAndTheDefaultGeneratorIsUntouched) {
  torch::data::samplers::RandomSampler sampler(10);  // its constructor draws a permutation
  torch::manual_seed(7);
  auto before = torch::rand({3});
  torch::manual_seed(7);
  auto first = epoch_order(sampler, 10, 123);
  auto again = epoch_order(sampler, 10, 123);
  auto other = epoch_order(sampler, 10, 124);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  EXPECT_TRUE(torch::equal(torch::rand({3}), before));
  std::vector<size_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  std::vector<size_t> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);
}

}  // namespace
}  // namespace detail
}  // namespace accel
