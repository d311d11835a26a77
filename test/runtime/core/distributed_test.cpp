// Run on 2 processes by `accel launch` (see test/CMakeLists.txt): every rank runs every test in
// the same order, and each checks its own side of the expectations. Collectives go over Gloo.

#include <accel/accel.h>

#include "core/accelerator_access.h"
#include "distributed/flight_recorder.h"
#include "support/datasets.h"
#include "support/temp_dir.h"

#include "accel_common/accelerator_methods.h"
#include "accel_common/flight_record.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

namespace {

using accel_test::LinearDecay;
using accel_test::RangeDataset;
using accel_test::RegressionDataset;
using accel_test::RegressionModel;
using Sequential = torch::data::samplers::SequentialSampler;
using Batches = std::vector<std::vector<int64_t>>;

int64_t rank() { return std::atoll(std::getenv("RANK")); }

class TwoProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_STREQ(std::getenv("WORLD_SIZE"), "2") << "run me with accel launch --num_processes 2";
  }
};

// ---- Collectives: rank r holds arange(2) + 1 + 2r -----------------------------------------------

TEST_F(TwoProcesses, GatherReduceBroadcast) {
  accel::Accelerator accelerator;
  ASSERT_EQ(accelerator.num_processes(), 2);
  ASSERT_EQ(accelerator.process_index(), rank());
  auto mine = torch::arange(2, torch::kFloat) + 1 + 2 * rank();
  auto expect = [](const torch::Tensor& t, std::vector<float> values) {
    EXPECT_TRUE(torch::equal(t, torch::tensor(values))) << t;
  };
  expect(accelerator.gather(mine), {1, 2, 3, 4});
  expect(accelerator.reduce(mine, accel::Reduction::Sum), {4, 6});
  expect(accelerator.reduce(mine, accel::Reduction::Mean), {2, 3});
  expect(accelerator.reduce(mine, accel::Reduction::Max), {3, 4});
  expect(mine, {1.0f + 2 * rank(), 2.0f + 2 * rank()});  // reduce does not modify its input
  expect(accelerator.broadcast(mine.clone()), {1, 2});
  expect(accelerator.broadcast(mine.clone(), 1), {3, 4});
  // 0-dim tensors gather to one element per process.
  expect(accelerator.gather(torch::tensor(static_cast<float>(rank()))), {0, 1});
  // Nested containers.
  auto gathered = accelerator.gather(std::map<std::string, torch::Tensor>{{"x", mine}});
  expect(gathered.at("x"), {1, 2, 3, 4});
  // Numbers: a running loss and a count of correct predictions.
  EXPECT_EQ(accelerator.reduce(0.25 + rank()), 1.5);
  EXPECT_EQ(accelerator.reduce(size_t{7} + rank()), size_t{15});
  EXPECT_EQ(accelerator.reduce(int64_t{3} + 2 * rank(), accel::Reduction::Mean), 4);
  EXPECT_EQ(accelerator.reduce(int{3} + 2 * rank(), accel::Reduction::Max), 5);
}

TEST_F(TwoProcesses, GatherForMetricsOfSeveralTensorsKeepsEachDtypeAndShape) {
  accel::Accelerator accelerator;
  auto logits = torch::arange(6, torch::kFloat).view({3, 2}) + 10 * rank();
  auto labels = torch::full({3}, rank(), torch::kLong);
  auto mask = torch::tensor({true, false, rank() == 1});
  auto loss = torch::tensor(0.5 + rank(), torch::kDouble);  // 0-dim: one element per process
  auto [all_logits, all_labels, all_mask, all_loss] =
      accelerator.gather_for_metrics(logits, labels, mask, loss);
  EXPECT_TRUE(
      torch::equal(all_logits, torch::cat({logits - 10 * rank(), logits - 10 * rank() + 10})));
  EXPECT_TRUE(torch::equal(all_labels, torch::tensor({0, 0, 0, 1, 1, 1}, torch::kLong)));
  EXPECT_TRUE(torch::equal(all_mask, torch::tensor({true, false, false, true, false, true})));
  EXPECT_TRUE(torch::equal(all_loss, torch::tensor({0.5, 1.5}, torch::kDouble)));
}

TEST_F(TwoProcesses, ObjectsPaddingAndSplitting) {
  accel::Accelerator accelerator;
  EXPECT_EQ(accelerator.gather_object(std::string(rank() == 0 ? "zero" : "one")),
            (std::vector<std::string>{"zero", "one"}));
  EXPECT_EQ(accelerator.gather_object(std::vector<int64_t>(rank() + 1, rank())),
            (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(accelerator.broadcast_object(std::string(rank() == 0 ? "from zero" : "other")),
            "from zero");

  auto ragged = torch::ones({2 + rank(), 2});
  auto padded = accelerator.pad_across_processes(ragged, accel::PadOptions().pad_index(-1));
  ASSERT_EQ(padded.size(0), 3);
  EXPECT_EQ(padded[2][0].item<float>(), rank() == 0 ? -1.0f : 1.0f);
  auto first =
      accelerator.pad_across_processes(ragged, accel::PadOptions().pad_index(-1).pad_first(true));
  EXPECT_EQ(first[0][0].item<float>(), rank() == 0 ? -1.0f : 1.0f);

  std::vector<int64_t> items(17);
  std::iota(items.begin(), items.end(), 0);
  auto part = accelerator.split_between_processes(items);
  EXPECT_EQ(part.size(), rank() == 0 ? 9u : 8u);
  EXPECT_EQ(part.front(), rank() == 0 ? 0 : 9);
  auto padded_part = accelerator.split_between_processes(items, /*apply_padding=*/true);
  EXPECT_EQ(padded_part.size(), 9u);
  EXPECT_EQ(padded_part.back(), rank() == 0 ? 8 : 16);
  auto tensor_part = accelerator.split_between_processes(torch::arange(17), true);
  EXPECT_EQ(tensor_part.size(0), 9);
  EXPECT_EQ(tensor_part[8].item<int64_t>(), rank() == 0 ? 8 : 16);
  // Fewer rows than processes: the process left none repeats the last row rather than getting an
  // empty share (a hand-sliced last batch of one row must not become an empty batch).
  auto one_row = accelerator.split_between_processes(torch::tensor({{7, 8}}), true);
  ASSERT_EQ(one_row.size(0), 1);
  EXPECT_EQ(one_row[0][1].item<int64_t>(), 8);
  EXPECT_EQ(accelerator.split_between_processes(torch::tensor({{7, 8}})).size(0),
            rank() == 0 ? 1 : 0);
  EXPECT_EQ(accelerator.split_between_processes(std::vector<int64_t>{5}, true),
            std::vector<int64_t>{5});
}

// Own job: ACCEL_DEBUG is read by the process's first Accelerator; the mismatch breaks the group.
TEST_F(TwoProcesses, DebugModeNamesMismatchedShapesInsteadOfHanging) {
  ::setenv("ACCEL_DEBUG", "1", 1);
  accel::Accelerator accelerator;
  ::unsetenv("ACCEL_DEBUG");
  try {
    accelerator.gather(torch::zeros({2 + rank()}));
    ADD_FAILURE() << "expected a shape error";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    // The backend's check of every collective (one message format for every ACCEL_DEBUG check).
    EXPECT_NE(message.find("differs between processes (found by ACCEL_DEBUG)"), std::string::npos)
        << message;
    EXPECT_NE(message.find("rank 0 is in gather, allgather [Float[2]]"), std::string::npos)
        << message;
    EXPECT_NE(message.find("rank 1 is in gather, allgather [Float[3]]"), std::string::npos)
        << message;
  }
}

// An optimizer over parameters no prepared model holds (the model was never prepared): nothing
// averages their gradients, and every process would train its own model. The first step stops on
// every process, saying what and how to fix it; the program that means it says so.
TEST_F(TwoProcesses, AnOptimizerOverUnpreparedParametersStopsAtItsFirstStep) {
  auto message_of_step = [](accel::Accelerator& accelerator) {
    RegressionModel model;
    accelerator.prepare(model);
    torch::nn::Linear forgotten(3, 2);  // never prepared
    auto params = model->parameters();
    for (auto& p : forgotten->parameters()) params.push_back(p);
    auto optimizer = accelerator.prepare(torch::optim::SGD(params, 0.1));
    for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
    const auto before = forgotten->weight.detach().clone();
    std::string message;
    try {
      optimizer.step();
    } catch (const c10::Error& e) {
      message = e.what_without_backtrace();
      EXPECT_TRUE(torch::equal(forgotten->weight, before)) << "stepped before refusing";
    }
    return message;
  };
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  const auto message = message_of_step(accelerator);
  EXPECT_NE(message.find("trains 2 parameter(s) that no prepared model holds (shapes [2, 3], [2])"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("accelerator.prepare(model)"), std::string::npos) << message;
  EXPECT_NE(message.find("allow_unprepared_parameters(true)"), std::string::npos) << message;
  accel::Accelerator allowing(
      accel::AcceleratorOptions().cpu(true).allow_unprepared_parameters(true));
  EXPECT_EQ(message_of_step(allowing), "");
}

// ACCEL_DEBUG: after each step, a hash of every parameter is compared across processes, and the
// first that differs is named (a prepared model's by its name, another by its place).
// Own job: ACCEL_DEBUG is read by the process's first Accelerator.
TEST_F(TwoProcesses, DebugModeNamesTheFirstParameterTheProcessesDisagreeOn) {
  ::setenv("ACCEL_DEBUG", "1", 1);
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).allow_unprepared_parameters(true));
  ::unsetenv("ACCEL_DEBUG");
  RegressionModel model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto step_message = [&] {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::ones_like(p);
    try {
      optimizer.step();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string();
  };
  EXPECT_EQ(step_message(), "");  // the same weights everywhere: nothing to say
  {
    torch::NoGradGuard no_grad;
    if (rank() == 1) model->b.add_(1);  // a process that went its own way
  }
  const auto message = step_message();
  EXPECT_NE(message.find("model 0: b is not the same on every process"), std::string::npos)
      << message;
  // A local parameter of different values on each process is named by its place.
  torch::manual_seed(static_cast<uint64_t>(rank()));
  torch::nn::Linear local(2, 2);
  auto local_optimizer = accelerator.prepare(torch::optim::SGD(local->parameters(), 0.1));
  for (auto& p : local->parameters()) p.mutable_grad() = torch::zeros_like(p);
  try {
    local_optimizer.step();
    ADD_FAILURE() << "expected the processes' weights to differ";
  } catch (const c10::Error& e) {
    const std::string text = e.what_without_backtrace();
    EXPECT_NE(text.find("the optimizer's parameter 0 (shape [2, 2])"), std::string::npos) << text;
  }
}

TEST_F(TwoProcesses, ProcessControl) {
  accel::Accelerator accelerator;
  EXPECT_EQ(accelerator.is_main_process(), rank() == 0);
  const std::string path =
      ::testing::TempDir() + "/accel_main_first_" + std::string(std::getenv("MASTER_PORT"));
  {
    auto guard = accelerator.main_process_first();
    if (accelerator.is_main_process()) {
      std::ofstream(path) << "written by the main process";
    } else {
      EXPECT_TRUE(std::ifstream(path).good()) << "the main process had not run first";
    }
  }
  accelerator.wait_for_everyone();
  if (accelerator.is_main_process()) std::remove(path.c_str());

  int ran = 0;
  accelerator.on_main_process([&] { ++ran; });
  EXPECT_EQ(ran, rank() == 0 ? 1 : 0);

  EXPECT_FALSE(accelerator.check_trigger());
  if (rank() == 1) accelerator.set_trigger();
  EXPECT_TRUE(accelerator.check_trigger());
  EXPECT_FALSE(accelerator.check_trigger());
}

// ---- Data loaders -----------------------------------------------------------------------------

Batches read_all(size_t size, size_t batch, accel::AcceleratorOptions options) {
  accel::Accelerator accelerator(options);
  auto loader = accelerator.prepare_data_loader<Sequential>(RangeDataset(size), batch);
  Batches out;
  for (auto& b : *loader) out.push_back(b);
  EXPECT_EQ(out.size(), loader->size());
  return out;
}

using Batch = std::vector<int64_t>;

// This process's side of a two-sided expectation.
template <typename T>
T mine(T rank0, T rank1) {
  return rank() == 0 ? rank0 : rank1;
}

TEST_F(TwoProcesses, LoaderShardsAsAccelerate) {
  EXPECT_EQ(read_all(24, 3, {}),
            mine<Batches>({{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
                          {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}}));
  EXPECT_EQ(read_all(22, 3, {}).back(), mine<Batch>({18, 19, 20}, {21, 0, 1}));
  EXPECT_EQ(read_all(20, 3, {}).back(), mine<Batch>({18, 19, 0}, {1, 2, 3}));
  EXPECT_EQ(read_all(2, 3, {}), mine<Batches>({{0, 1, 0}}, {{1, 0, 1}}));
  auto uneven = accel::AcceleratorOptions().even_batches(false);
  EXPECT_EQ(read_all(22, 3, uneven).back(), mine<Batch>({18, 19, 20}, {21}));
  EXPECT_EQ(read_all(2, 3, uneven), mine<Batches>({{0, 1}}, {}));
  auto split = accel::AcceleratorOptions().split_batches(true);
  auto split24 = read_all(24, 4, split);
  EXPECT_EQ(split24.front(), mine<Batch>({0, 1}, {2, 3}));
  EXPECT_EQ(split24[1], mine<Batch>({4, 5}, {6, 7}));
  EXPECT_EQ(read_all(21, 4, split).back(), mine<Batch>({20, 0}, {1, 2}));
}

TEST_F(TwoProcesses, ShufflingIsTheSameOnEveryProcessAndChangesPerEpoch) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().seed(11));
  auto loader = accelerator.prepare(torch::data::make_data_loader(RangeDataset(40), 4));
  std::vector<Batches> epochs(2);
  for (auto& epoch : epochs) {
    for (auto& b : *loader) epoch.push_back(b);
  }
  // Both processes together cover every sample once per epoch...
  for (const auto& epoch : epochs) {
    std::vector<int64_t> flat;
    for (const auto& b : epoch) flat.insert(flat.end(), b.begin(), b.end());
    auto all = accelerator.gather_object(flat);
    std::sort(all.begin(), all.end());
    std::vector<int64_t> expected(40);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(all, expected);
  }
  // ...and the two epochs are shuffled differently.
  EXPECT_NE(epochs[0], epochs[1]);
}

TEST_F(TwoProcesses, UnseededLoadersShuffleAlikeEvenWhenProcessesSeedDifferently) {
  torch::manual_seed(1000 + rank());
  accel::Accelerator accelerator;
  auto loader = accelerator.prepare(torch::data::make_data_loader(RangeDataset(40), 4));
  std::vector<int64_t> flat;
  for (auto& b : *loader) flat.insert(flat.end(), b.begin(), b.end());
  auto all = accelerator.gather_object(flat);
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(40);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
}

TEST_F(TwoProcesses, GatherForMetricsDropsTheDuplicatedTail) {
  accel::Accelerator accelerator;
  auto loader = accelerator.prepare_data_loader<Sequential>(RangeDataset(9), 5);
  std::vector<int64_t> seen;
  std::vector<int64_t> tensor_seen;
  for (auto& batch : *loader) {
    auto all = accelerator.gather_for_metrics(batch);
    seen.insert(seen.end(), all.begin(), all.end());
    auto as_tensor = torch::tensor(batch);
    auto pair = accelerator.gather_for_metrics(as_tensor, as_tensor * 10);
    auto gathered = std::get<0>(pair);
    EXPECT_TRUE(torch::equal(std::get<1>(pair), gathered * 10));
    for (int64_t i = 0; i < gathered.size(0); ++i)
      tensor_seen.push_back(gathered[i].item<int64_t>());
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(tensor_seen, seen);
}

// ---- Training -------------------------------------------------------------------------------

struct Trained {
  double a, b;
};

Trained train_plain(size_t batch_size, int epochs, const std::vector<std::vector<size_t>>& orders) {
  RegressionModel model;
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  RegressionDataset dataset;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const auto& order = orders[epoch];
    for (size_t begin = 0; begin < order.size(); begin += batch_size) {
      std::vector<torch::Tensor> xs, ys;
      for (size_t i = begin; i < std::min(order.size(), begin + batch_size); ++i) {
        auto example = dataset.get(order[i]);
        xs.push_back(example.data);
        ys.push_back(example.target);
      }
      optimizer.zero_grad();
      torch::mse_loss(model->forward(torch::stack(xs)), torch::stack(ys)).backward();
      optimizer.step();
    }
  }
  return {model->a.item<double>(), model->b.item<double>()};
}

template <typename Sampler>
Trained train_accelerated(accel::AcceleratorOptions options, size_t batch_size, int epochs) {
  accel::Accelerator accelerator(options.seed(42));
  RegressionModel model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto loader = accelerator.prepare_data_loader<Sampler>(
      RegressionDataset().map(torch::data::transforms::Stack<>()), batch_size);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (auto& batch : *loader) {
      auto step = accelerator.accumulate(model);
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  return {model->a.item<double>(), model->b.item<double>()};
}

std::vector<std::vector<size_t>> sequential_orders(int epochs) {
  std::vector<size_t> order(64);
  std::iota(order.begin(), order.end(), 0);
  return std::vector<std::vector<size_t>>(epochs, order);
}

std::vector<std::vector<size_t>> shuffled_orders(int epochs, uint64_t seed) {
  std::vector<std::vector<size_t>> orders;
  torch::data::samplers::RandomSampler sampler(64);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    orders.push_back(accel::detail::epoch_order(sampler, 64, seed + epoch));
  }
  return orders;
}

void expect_same(const Trained& got, const Trained& expected) {
  EXPECT_NEAR(got.a, expected.a, 1e-6);
  EXPECT_NEAR(got.b, expected.b, 1e-6);
  // And training did happen: from a = b = 0 the fit moved well toward y = 2x + 3 (6 steps of the
  // 32-sample run get b to about 2.25).
  EXPECT_GT(got.a, 1.0);
  EXPECT_GT(got.b, 2.0);
}

TEST_F(TwoProcesses, TrainingMatchesOneProcessWithTheGlobalBatch) {
  const auto baseline = train_plain(16, 3, sequential_orders(3));
  expect_same(train_accelerated<Sequential>({}, 8, 3), baseline);
  expect_same(train_accelerated<Sequential>(accel::AcceleratorOptions().split_batches(true), 16, 3),
              baseline);
}

TEST_F(TwoProcesses, ShuffledTrainingMatchesOneProcessWithTheGlobalBatch) {
  const auto baseline = train_plain(16, 3, shuffled_orders(3, 42));
  expect_same(train_accelerated<torch::data::samplers::RandomSampler>({}, 8, 3), baseline);
  expect_same(train_accelerated<torch::data::samplers::RandomSampler>(
                  accel::AcceleratorOptions().split_batches(true), 16, 3),
              baseline);
}

TEST_F(TwoProcesses, AccumulationMatchesOneProcessWithTheWholeBatch) {
  // 2 processes x batch 8 x 2 accumulation steps = one step over 32 samples.
  const auto baseline = train_plain(32, 3, sequential_orders(3));
  expect_same(train_accelerated<Sequential>(
                  accel::AcceleratorOptions().gradient_accumulation_steps(2), 8, 3),
              baseline);
}

/// Micro-steps of a Linear(3, 1) over `passes` passes of RangeDataset(size) in batches of 1 per
/// process: whether each synchronised, and whether both processes then held equal gradients.
struct Syncs {
  std::vector<bool> synced, equal;
  bool same_weights = false;  // on both processes at the end
};
Syncs record_syncs(accel::AcceleratorOptions options, size_t size, int passes) {
  accel::Accelerator accelerator(std::move(options));
  torch::manual_seed(0);
  auto model = torch::nn::Linear(3, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto loader = accelerator.prepare_data_loader<Sequential>(RangeDataset(size), 1);
  Syncs syncs;
  for (int pass = 0; pass < passes; ++pass) {
    for (auto& batch : *loader) {
      auto step = accelerator.accumulate(model);
      auto x = torch::full({1, 3}, static_cast<float>(batch[0] + 1));
      accelerator.backward(model->forward(x).sum());
      auto grads = accelerator.gather(model->weight.grad().unsqueeze(0));
      syncs.synced.push_back(accelerator.sync_gradients());
      syncs.equal.push_back(torch::allclose(grads[0], grads[1]));
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  auto weights = accelerator.gather(model->weight.detach().unsqueeze(0));
  syncs.same_weights = torch::equal(weights[0], weights[1]);
  return syncs;
}

TEST_F(TwoProcesses, GradientsSyncOnlyOnSyncStepsAndAtTheEndOfTheLoader) {
  // 5 batches per process: micro-steps 1..5 sync on 2, 4 and at the end (5).
  const auto syncs =
      record_syncs(accel::AcceleratorOptions().gradient_accumulation_steps(2), 10, 1);
  EXPECT_EQ(syncs.synced, (std::vector<bool>{false, true, false, true, true}));
  EXPECT_EQ(syncs.equal, syncs.synced);
  EXPECT_TRUE(syncs.same_weights);
}

TEST_F(TwoProcesses, SyncWithDataloaderFalseKeepsWindowsWholeAcrossPasses) {
  // 3 batches per process and pass, accumulation 2: the windows close on micro-steps 2, 4, 6
  // of the stream, not at each pass's end; gradients are averaged exactly then.
  const auto syncs = record_syncs(
      accel::AcceleratorOptions().gradient_accumulation_steps(2).sync_with_dataloader(false), 6, 2);
  EXPECT_EQ(syncs.synced, (std::vector<bool>{false, true, false, true, false, true}));
  EXPECT_EQ(syncs.equal, syncs.synced);
}

TEST_F(TwoProcesses, RngTypesCopyTheMainProcesssGeneratorsAsAPassStarts) {
  auto draws_after_a_pass = [](std::vector<std::string> rng_types) {
    accel::Accelerator accelerator(accel::AcceleratorOptions().rng_types(std::move(rng_types)));
    accel::set_seed(7, /*device_specific=*/true);  // each process its own stream
    auto loader =
        accelerator.prepare_data_loader<torch::data::samplers::RandomSampler>(RangeDataset(8), 2);
    std::vector<int64_t> seen;
    for (auto& batch : *loader) seen.insert(seen.end(), batch.begin(), batch.end());
    auto all_seen = accelerator.gather_object(seen);
    std::sort(all_seen.begin(), all_seen.end());
    EXPECT_EQ(all_seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));  // shards never overlap
    return accelerator.gather(torch::rand({1, 4}));
  };
  // "torch": dropout and augmentation draw the same numbers on every process after the pass
  // starts; without it each process keeps its own stream.
  auto synchronised = draws_after_a_pass({"generator", "torch"});
  EXPECT_TRUE(torch::equal(synchronised[0], synchronised[1])) << synchronised;
  auto own = draws_after_a_pass({"generator"});
  EXPECT_FALSE(torch::equal(own[0], own[1])) << own;
  // Without "generator" the order is still the main process's: no overlapping shards.
  draws_after_a_pass({"torch"});
}

TEST_F(TwoProcesses, PrepareCopiesRankZerosParameters) {
  accel::Accelerator accelerator;
  torch::manual_seed(100 + rank());  // different initialisation on each process
  auto model = torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8));
  accelerator.prepare(model);
  for (const auto& p : model->parameters()) {
    auto both = accelerator.gather(p.detach().unsqueeze(0));
    EXPECT_TRUE(torch::equal(both[0], both[1]));
  }
}

TEST_F(TwoProcesses, NoSyncAndTriggerSync) {
  accel::Accelerator accelerator;
  auto model = torch::nn::Linear(2, 1);
  accelerator.prepare(model);
  auto x = torch::full({1, 2}, static_cast<float>(rank() + 1));
  {
    auto guard = accelerator.no_sync(model);
    accelerator.backward(model->forward(x).sum());
    auto grads = accelerator.gather(model->weight.grad().unsqueeze(0));
    EXPECT_FALSE(torch::allclose(grads[0], grads[1]));
    model->zero_grad();
    accelerator.trigger_sync_in_backward(model);
    accelerator.backward(model->forward(x).sum());
    grads = accelerator.gather(model->weight.grad().unsqueeze(0));
    EXPECT_TRUE(torch::allclose(grads[0], grads[1]));
    EXPECT_TRUE(torch::allclose(grads[0], torch::full({1, 2}, 1.5)));
  }
}

TEST_F(TwoProcesses, GradientsAreBucketMemoryThatEveryZeroGradAccepts) {
  for (bool as_view : {true, false}) {
    SCOPED_TRACE(as_view ? "gradient_as_bucket_view" : "copied gradients");
    accel::Accelerator accelerator(accel::AcceleratorOptions().ddp(
        accel::DistributedDataParallelOptions().gradient_as_bucket_view(as_view)));
    torch::manual_seed(0);
    auto model =
        torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
    // The averaged gradient, from an unprepared copy that sees both processes' inputs.
    auto reference = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone());
    for (int r = 0; r < 2; ++r) {
      reference->forward(torch::full({1, 4}, static_cast<float>(r + 1))).sum().div(2).backward();
    }
    accelerator.prepare(model);
    torch::optim::SGD sgd(model->parameters(), 0.1);
    torch::optim::Optimizer& optimizer = sgd;  // LibTorch's own zero_grad, which detaches in place
    const auto x = torch::full({1, 4}, static_cast<float>(rank() + 1));
    for (int step = 0; step < 4; ++step) {
      accelerator.backward(model->forward(x).sum());
      const auto params = model->parameters();
      const auto expected = reference->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_FALSE(params[i].grad().is_view());
        EXPECT_TRUE(torch::allclose(params[i].grad(), expected[i].grad(), 1e-5, 1e-6))
            << "step " << step << ", parameter " << i;
      }
      // All four parameters fit in the first bucket: as views they share its memory.
      EXPECT_EQ(params[0].grad().is_alias_of(params[3].grad()), as_view);
      if (step % 3 == 0) optimizer.zero_grad(/*set_to_none=*/false);
      if (step % 3 == 1) optimizer.zero_grad(/*set_to_none=*/true);
      if (step % 3 == 2) model->zero_grad(/*set_to_none=*/false);
    }
  }
}

TEST_F(TwoProcesses, TwoModelsWithSeparateLosses) {
  accel::Accelerator accelerator;
  auto first = torch::nn::Linear(2, 1);
  auto second = torch::nn::Linear(2, 1);
  accelerator.prepare(first);
  accelerator.prepare(second);
  auto x = torch::full({1, 2}, static_cast<float>(rank() + 1));
  for (int i = 0; i < 2; ++i) {
    accelerator.backward(first->forward(x).sum());   // reaches only the first model
    accelerator.backward(second->forward(x).sum());  // and only the second
  }
  for (auto* m : {&first, &second}) {
    auto grads = accelerator.gather((*m)->weight.grad().unsqueeze(0));
    EXPECT_TRUE(torch::allclose(grads[0], grads[1]));
  }
}

// A loop that accumulates by hand (`if ((i + 1) % k == 0) { step; zero_grad; }`) under
// accumulate_until: k = 4 and 3 over 10 batches an epoch (the last micro-batches of an epoch carry
// into the next, as in the plain program), with and without the program's own `loss / k`. With
// split batches each process reads half of every batch, so the job must end with the one-process
// program's weights; the gradients are all-reduced once per optimizer step, never on the other
// micro-batches (where the two processes' gradients still differ).
TEST_F(TwoProcesses, HandWrittenAccumulationAllReducesOnlyOnTheBatchesThatStep) {
  for (const int k : {4, 3}) {
    for (const bool divide : {false, true}) {
      SCOPED_TRACE("k = " + std::to_string(k) + (divide ? ", loss / k" : ""));
      auto loss_of = [&](RegressionModel& m, const torch::Tensor& x, const torch::Tensor& y) {
        auto loss = torch::mse_loss(m->forward(x), y);
        return divide ? loss / k : loss;
      };
      // The program as written, on one process: 10 batches of 4 an epoch.
      RegressionModel plain;
      torch::optim::SGD plain_optimizer(plain->parameters(), 0.1);
      auto plain_loader = torch::data::make_data_loader<Sequential>(
          RegressionDataset(40).map(torch::data::transforms::Stack<>()), 4);
      for (int epoch = 0; epoch < 2; ++epoch) {
        int64_t i = 0;
        for (auto& batch : *plain_loader) {
          loss_of(plain, batch.data, batch.target).backward();
          if ((i + 1) % k == 0) {
            plain_optimizer.step();
            plain_optimizer.zero_grad();
          }
          ++i;
        }
      }
      // The migrated program on 2 processes.
      accel::Accelerator accelerator(accel::AcceleratorOptions().split_batches(true));
      RegressionModel model;
      accelerator.prepare(model);
      auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
      auto loader = accelerator.prepare_data_loader<Sequential>(
          RegressionDataset(40).map(torch::data::transforms::Stack<>()), 4);
      int64_t steps = 0;
      for (int epoch = 0; epoch < 2; ++epoch) {
        int64_t i = 0;
        for (auto& batch : *loader) {
          auto step = accelerator.accumulate_until((i + 1) % k == 0, model);
          accelerator.backward(loss_of(model, batch.data, batch.target));
          auto grads = accelerator.gather(model->a.grad().reshape({1}));
          if ((i + 1) % k == 0) {
            EXPECT_TRUE(accelerator.sync_gradients());
            EXPECT_DOUBLE_EQ(grads[0].item<double>(), grads[1].item<double>());
            optimizer.step();
            optimizer.zero_grad();
            ++steps;
          } else {
            EXPECT_FALSE(accelerator.sync_gradients());
            EXPECT_NE(grads[0].item<double>(), grads[1].item<double>()) << "all-reduced at " << i;
          }
          ++i;
        }
      }
      EXPECT_EQ(steps, 2 * (10 / k));
      EXPECT_EQ(accelerator.gradient_all_reduces(), steps);
      EXPECT_NEAR(model->a.item<double>(), plain->a.item<double>(), 1e-6);
      EXPECT_NEAR(model->b.item<double>(), plain->b.item<double>(), 1e-6);
    }
  }
}

TEST_F(TwoProcesses, SchedulerAdvancesOncePerProcessPerOptimizerStep) {
  for (bool split : {false, true}) {
    accel::Accelerator accelerator(accel::AcceleratorOptions().split_batches(split));
    RegressionModel model;
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 1.0));
    auto scheduler = accelerator.prepare(LinearDecay(optimizer));
    optimizer.step();
    scheduler.step();
    EXPECT_DOUBLE_EQ(accel_test::learning_rate(optimizer), split ? 0.9 : 0.8);
  }
}

// ---- The method table's roles, as the runtime behaves -------------------------------------------

/// Every collective this process has entered so far, on every group (the flight record numbers
/// each group's collectives, sends and receives; it keeps the last few, the last number with them).
uint64_t collectives_entered() {
  std::string error;
  const auto record = accel::flight::parse_flight_record(accel::distributed::flight_record_text(),
                                                         "this process's record", &error);
  EXPECT_TRUE(record) << error;
  std::map<std::string, uint64_t> last;
  if (record) {
    for (const auto& entry : record->entries)
      last[entry.group] = std::max(last[entry.group], entry.seq);
  }
  uint64_t total = 0;
  for (const auto& [group, seq] : last) total += seq;
  return total;
}

struct Checkpointable {
  torch::Tensor value = torch::zeros({1});
  void save(torch::serialize::OutputArchive& archive) const { archive.write("value", value); }
  void load(torch::serialize::InputArchive& archive) { archive.read("value", value); }
};

// accel-migrate trusts the table (accel_common/accelerator_methods.h): a call marked local or
// identity may sit under `if (is_main_process())`. Every such method is called here, under each
// sharding strategy with fp16's loss scaler, after a synchronising backward (where unscaling
// decides found-inf over the processes when each holds a shard), and none may enter a collective.
// A method the walk has no call for fails it: a new local method must be walked.
TEST_F(TwoProcesses, NoMethodTheTableMarksLocalEntersACollective) {
  accel_test::TempDir dir("local-methods");  // each process its own
  for (const char* strategy : {"NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD"}) {
    accel::Accelerator accelerator(
        accel::AcceleratorOptions().cpu(true).sharding_strategy(strategy));
    accel::detail::use_fp16_scaler(accelerator);
    torch::manual_seed(0);
    torch::nn::Linear model(4, 2);
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
    auto loader = accelerator.prepare(torch::data::make_data_loader(RangeDataset(8), 2));
    Checkpointable extra;
    auto values = torch::arange(4, torch::kFloat);
    std::ostringstream sink;
    accelerator.backward(model->forward(torch::ones({3, 4})).sum());
    ASSERT_TRUE(accelerator.sync_gradients());

    const std::vector<std::pair<std::string, std::function<void()>>> walk = {
        {"current", [&] { accel::Accelerator::current(); }},
        {"has_current", [&] { accel::Accelerator::has_current(); }},
        {"device", [&] { accelerator.device(); }},
        {"process_index", [&] { accelerator.process_index(); }},
        {"local_process_index", [&] { accelerator.local_process_index(); }},
        {"num_processes", [&] { accelerator.num_processes(); }},
        {"local_num_processes", [&] { accelerator.local_num_processes(); }},
        {"is_main_process", [&] { accelerator.is_main_process(); }},
        {"is_local_main_process", [&] { accelerator.is_local_main_process(); }},
        {"is_last_process", [&] { accelerator.is_last_process(); }},
        {"data_parallel_rank", [&] { accelerator.data_parallel_rank(); }},
        {"data_parallel_shard_rank", [&] { accelerator.data_parallel_shard_rank(); }},
        {"tensor_parallel_rank", [&] { accelerator.tensor_parallel_rank(); }},
        {"context_parallel_rank", [&] { accelerator.context_parallel_rank(); }},
        {"pipeline_parallel_rank", [&] { accelerator.pipeline_parallel_rank(); }},
        {"parallelism_config", [&] { accelerator.parallelism_config(); }},
        {"options", [&] { accelerator.options(); }},
        {"gradient_accumulation_steps", [&] { accelerator.gradient_accumulation_steps(); }},
        {"mixed_precision", [&] { accelerator.mixed_precision(); }},
        {"fp8_backend", [&] { accelerator.fp8_backend(); }},
        {"scaler", [&] { accelerator.scaler(); }},
        {"sync_gradients", [&] { accelerator.sync_gradients(); }},
        {"gradient_all_reduces", [&] { accelerator.gradient_all_reduces(); }},
        {"end_of_dataloader", [&] { accelerator.end_of_dataloader(); }},
        {"optimizer_step_was_skipped", [&] { accelerator.optimizer_step_was_skipped(); }},
        {"unscale_gradients", [&] { accelerator.unscale_gradients(); }},
        {"autocast", [&] { auto scope = accelerator.autocast(); }},
        {"accumulate", [&] { auto scope = accelerator.accumulate(model); }},
        {"accumulate_until", [&] { auto scope = accelerator.accumulate_until(true, model); }},
        {"no_sync", [&] { auto scope = accelerator.no_sync(model); }},
        {"trigger_sync_in_backward", [&] { accelerator.trigger_sync_in_backward(model); }},
        {"maybe_context_parallel", [&] { accelerator.maybe_context_parallel({}, {}); }},
        {"split_between_processes", [&] { accelerator.split_between_processes(values); }},
        {"main_process_only", [&] { accelerator.main_process_only(sink) << "x"; }},
        {"printf", [&] { accelerator.printf("%s", ""); }},
        {"puts", [&] { accelerator.puts("local methods"); }},
        {"print", [&] { accelerator.print(""); }},
        {"on_main_process", [&] { accelerator.on_main_process([] {}); }},
        {"on_local_main_process", [&] { accelerator.on_local_main_process([] {}); }},
        {"on_last_process", [&] { accelerator.on_last_process([] {}); }},
        {"on_process", [&] { accelerator.on_process(1, [] {}); }},
        {"on_local_process", [&] { accelerator.on_local_process(1, [] {}); }},
        {"set_trigger", [&] { accelerator.set_trigger(); }},
        {"skip_first_batches", [&] { accelerator.skip_first_batches(*loader, 1); }},
        {"unwrap_model", [&] { accelerator.unwrap_model(model); }},
        {"resumed", [&] { accelerator.resumed(); }},
        {"register_for_checkpointing", [&] { accelerator.register_for_checkpointing(extra); }},
        {"register_save_state_pre_hook",
         [&] { accelerator.register_save_state_pre_hook([](auto&, const auto&) {}); }},
        {"register_load_state_pre_hook",
         [&] { accelerator.register_load_state_pre_hook([](auto&, const auto&) {}); }},
        {"save",
         [&] {
           accelerator.save({{"w", values}}, (dir / ("saved-" + std::to_string(rank()))).string());
         }},
        {"project_configuration", [&] { accelerator.project_configuration(); }},
        {"step", [&] { accelerator.step(); }},
        {"init_trackers", [&] { accelerator.init_trackers("local-methods"); }},
        {"log",
         [&] {
           accelerator.log({{"loss", 1.0}});
         }},
        {"get_tracker", [&] { accelerator.get_tracker("jsonl"); }},
        {"end_training", [&] { accelerator.end_training(); }},
        {"free_memory", [&] { accelerator.free_memory(); }},
        {"clear", [&] { accelerator.clear(); }},
    };
    std::set<std::string> walked;
    for (const auto& [name, call] : walk) {
      const auto* method = accel::contract::find_accelerator_method(name);
      ASSERT_NE(method, nullptr) << name << " is not in the method table";
      if (method->role != accel::contract::MethodRole::local &&
          method->role != accel::contract::MethodRole::identity)
        continue;  // the table says it communicates: nothing to check
      walked.insert(name);
      const uint64_t before = collectives_entered();
      try {
        call();
      } catch (const c10::Error&) {  // a rank without a mesh, a tracker not started: the call
      }                              // is walked, not its answer
      EXPECT_EQ(collectives_entered(), before)
          << name << " is marked "
          << (method->role == accel::contract::MethodRole::local ? "local" : "identity")
          << " in accel_common/accelerator_methods.h and entered a collective under " << strategy;
    }
    for (const auto& method : accel::contract::kAcceleratorMethods) {
      if (method.role != accel::contract::MethodRole::local &&
          method.role != accel::contract::MethodRole::identity)
        continue;
      EXPECT_TRUE(walked.count(std::string(method.name)))
          << method.name << " is marked local or identity and this walk has no call for it";
    }
  }
}

}  // namespace
