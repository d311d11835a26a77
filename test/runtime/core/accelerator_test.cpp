// One process: the Accelerator must behave as plain LibTorch, and its training-loop semantics
// (accumulation, gated optimizer and scheduler steps, loaders) hold without any collective.

#include <accel/accel.h>

#include "support/datasets.h"
#include "support/env_guard.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

using accel_test::LinearDecay;
using accel_test::RangeDataset;
using accel_test::RegressionDataset;
using accel_test::RegressionModel;
using Sequential = torch::data::samplers::SequentialSampler;

std::pair<double, double> train_plain(size_t batch_size, int epochs) {
  RegressionModel model;
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader<Sequential>(
      RegressionDataset().map(torch::data::transforms::Stack<>()), batch_size);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      torch::mse_loss(model->forward(batch.data), batch.target).backward();
      optimizer.step();
    }
  }
  return {model->a.item<double>(), model->b.item<double>()};
}

// The training step as user code often has it: through the base optimizer class, whose
// zero_grad() is not virtual in LibTorch.
void step_through_base(torch::optim::Optimizer& optimizer) {
  optimizer.step();
  optimizer.zero_grad();
}

TEST(Accelerator, OneProcessOnTheCpu) {
  accel::Accelerator accelerator;
  EXPECT_EQ(accelerator.num_processes(), 1);
  EXPECT_EQ(accelerator.process_index(), 0);
  EXPECT_TRUE(accelerator.is_main_process());
  EXPECT_TRUE(accelerator.is_local_main_process());
  EXPECT_TRUE(accelerator.device().is_cpu());
}

// Code the creating function does not reach asks for the process's Accelerator (what
// accel-migrate writes instead of adding a parameter): the newest one alive, then the one before
// it; with none alive, an error saying where the last one was made.
TEST(Accelerator, CurrentIsTheNewestAliveAndNamesWhereTheLastWasMade) {
  ASSERT_FALSE(accel::Accelerator::has_current());
  try {
    accel::Accelerator::current();
    ADD_FAILURE() << "current() with no Accelerator returned";
  } catch (const c10::Error& error) {
    // "has been created" in a fresh process; "is alive" after this suite's earlier tests.
    EXPECT_NE(std::string(error.what_without_backtrace()).find("no Accelerator"), std::string::npos)
        << error.what_without_backtrace();
  }
  int outer_line = 0;
  {
    accel::Accelerator outer;
    outer_line = __LINE__ - 1;
    EXPECT_EQ(&accel::Accelerator::current(), &outer);
    {
      accel::Accelerator inner;
      EXPECT_EQ(&accel::Accelerator::current(), &inner);
      EXPECT_TRUE(accel::Accelerator::has_current());
    }
    EXPECT_EQ(&accel::Accelerator::current(), &outer);
    // A loader's worker thread or a callback sees the same one.
    const accel::Accelerator* seen = nullptr;
    std::thread([&] { seen = &accel::Accelerator::current(); }).join();
    EXPECT_EQ(seen, &outer);
  }
  EXPECT_FALSE(accel::Accelerator::has_current());
  try {
    accel::Accelerator::current();
    ADD_FAILURE() << "current() after the last Accelerator was destroyed returned";
  } catch (const c10::Error& error) {
    const std::string message = error.what_without_backtrace();
    EXPECT_NE(message.find("accelerator_test.cpp:" + std::to_string(outer_line)), std::string::npos)
        << message;
    EXPECT_NE(message.find("was destroyed"), std::string::npos) << message;
  }
}

// An unseeded program draws its initial weights from the default generator's fixed seed: an
// Accelerator constructed first must not draw from it, or one migrated process would start from
// other weights than the original.
TEST(Accelerator, ConstructionLeavesTheDefaultGeneratorAlone) {
  const auto before = accel::detail::default_generator_state();
  const auto seed = at::detail::getDefaultCPUGenerator().current_seed();
  {
    accel::Accelerator accelerator;
    RegressionModel model;
    accelerator.prepare(model);
    EXPECT_TRUE(torch::equal(accel::detail::default_generator_state(), before));
  }
  EXPECT_EQ(at::detail::getDefaultCPUGenerator().current_seed(), seed);
  EXPECT_TRUE(torch::equal(accel::detail::default_generator_state(), before));
}

TEST(Accelerator, OneProcessTrainsExactlyAsPlainLibTorch) {
  const auto expected = train_plain(16, 3);
  accel::Accelerator accelerator;
  RegressionModel model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto loader = accelerator.prepare(torch::data::make_data_loader<Sequential>(
      RegressionDataset().map(torch::data::transforms::Stack<>()), 16));
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch : *loader) {
      auto step = accelerator.accumulate(model);
      optimizer.zero_grad();
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      optimizer.step();
    }
  }
  EXPECT_EQ(model->a.item<double>(), expected.first);
  EXPECT_EQ(model->b.item<double>(), expected.second);
}

TEST(Accelerator, AccumulationThroughTheBaseOptimizerEqualsTheLargerBatch) {
  const auto expected = train_plain(16, 3);
  accel::Accelerator accelerator(accel::AcceleratorOptions().gradient_accumulation_steps(2));
  RegressionModel model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto loader = accelerator.prepare_data_loader<Sequential>(
      RegressionDataset().map(torch::data::transforms::Stack<>()), 8);
  std::vector<bool> syncs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch : *loader) {
      auto step = accelerator.accumulate(model);
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      syncs.push_back(accelerator.sync_gradients());
      step_through_base(optimizer);
    }
  }
  EXPECT_EQ(syncs.size(), 24u);
  EXPECT_FALSE(syncs[0]);
  EXPECT_TRUE(syncs[1]);
  EXPECT_NEAR(model->a.item<double>(), expected.first, 1e-6);
  EXPECT_NEAR(model->b.item<double>(), expected.second, 1e-6);
}

TEST(Accelerator, EndOfLoaderForcesSynchronisation) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().gradient_accumulation_steps(2));
  auto loader = accelerator.prepare_data_loader<Sequential>(RangeDataset(9), 3);
  std::vector<bool> syncs, ends;
  for (auto& batch : *loader) {
    (void)batch;
    auto step = accelerator.accumulate();
    syncs.push_back(accelerator.sync_gradients());
    ends.push_back(accelerator.end_of_dataloader());
  }
  EXPECT_EQ(syncs, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(ends, (std::vector<bool>{false, false, true}));
  EXPECT_FALSE(accelerator.end_of_dataloader());
}

TEST(Accelerator, SyncWithDataloaderFalseRunsWindowsAcrossPasses) {
  // 8 batches a pass, accumulation 3, 3 passes: windows of 3 consecutive batches of the stream,
  // crossing pass ends, as a plain loop that counts batches across epochs.
  auto plain = [] {
    RegressionModel model;
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    auto loader = torch::data::make_data_loader<Sequential>(
        RegressionDataset().map(torch::data::transforms::Stack<>()), 8);
    int64_t micro = 0;
    for (int epoch = 0; epoch < 3; ++epoch) {
      for (auto& batch : *loader) {
        (torch::mse_loss(model->forward(batch.data), batch.target) / 3).backward();
        if (++micro % 3 == 0) {
          optimizer.step();
          optimizer.zero_grad();
        }
      }
    }
    return std::make_pair(model->a.item<double>(), model->b.item<double>());
  };
  auto accelerated = [](bool sync_with_dataloader, std::vector<bool>* syncs) {
    accel::Accelerator accelerator(
        accel::AcceleratorOptions().gradient_accumulation_steps(3).sync_with_dataloader(
            sync_with_dataloader));
    RegressionModel model;
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
    auto loader = accelerator.prepare_data_loader<Sequential>(
        RegressionDataset().map(torch::data::transforms::Stack<>()), 8);
    for (int epoch = 0; epoch < 3; ++epoch) {
      for (auto& batch : *loader) {
        auto step = accelerator.accumulate(model);
        accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
        if (syncs) syncs->push_back(accelerator.sync_gradients());
        optimizer.step();
        optimizer.zero_grad();
      }
    }
    return std::make_pair(model->a.item<double>(), model->b.item<double>());
  };
  std::vector<bool> syncs;
  const auto across = accelerated(false, &syncs);
  const auto expected = plain();
  EXPECT_NEAR(across.first, expected.first, 1e-6);
  EXPECT_NEAR(across.second, expected.second, 1e-6);
  ASSERT_EQ(syncs.size(), 24u);
  for (size_t i = 0; i < syncs.size(); ++i) EXPECT_EQ(syncs[i], i % 3 == 2) << "micro-step " << i;
  // The default closes a window at each pass's end (3 + 3 + 2): another result.
  const auto per_pass = accelerated(true, nullptr);
  EXPECT_GT(std::abs(per_pass.first - expected.first), 1e-4);
}

TEST(Accelerator, GatedOptimizerKeepsGradientsOnMicroSteps) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().gradient_accumulation_steps(2));
  RegressionModel model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto x = torch::ones({4, 1});
  {
    auto step = accelerator.accumulate(model);
    accelerator.backward(model->forward(x).sum());
    step_through_base(optimizer);  // micro-step: neither step nor zero_grad may act
    optimizer.zero_grad();         // nor the direct call
  }
  EXPECT_EQ(model->a.item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(model->a.grad().item<double>(), 2.0);       // sum(x) / 2 accumulation steps
  EXPECT_EQ(optimizer.param_groups()[0].params().size(), 2u);  // restored after the scope
  {
    auto step = accelerator.accumulate(model);
    accelerator.backward(model->forward(x).sum());
    EXPECT_DOUBLE_EQ(model->a.grad().item<double>(), 4.0);
    step_through_base(optimizer);
  }
  EXPECT_FLOAT_EQ(model->a.item<float>(), -0.4f);
  // LibTorch 2.x's default: gradients set to none, not zeroed.
  EXPECT_FALSE(model->a.grad().defined());
}

TEST(Accelerator, PreparedZeroGradTakesSetToNoneAsLibTorchDoes) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().gradient_accumulation_steps(2));
  RegressionModel model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto x = torch::ones({4, 1});
  for (int micro = 0; micro < 2; ++micro) {
    auto step = accelerator.accumulate(model);
    accelerator.backward(model->forward(x).sum());
    optimizer.zero_grad(false);  // a no-op on the micro-step, zeroes on the synchronising one
    if (micro == 0) {
      EXPECT_DOUBLE_EQ(model->a.grad().item<double>(), 2.0);
    }
  }
  ASSERT_TRUE(model->a.grad().defined());
  EXPECT_EQ(model->a.grad().item<double>(), 0.0);
  optimizer.zero_grad();
  EXPECT_FALSE(model->a.grad().defined());
}

TEST(Accelerator, SchedulerStepsOncePerOptimizerStepOnOneProcess) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().gradient_accumulation_steps(2));
  RegressionModel model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 1.0));
  auto scheduler = accelerator.prepare(LinearDecay(optimizer));
  {
    auto step = accelerator.accumulate(model);
    scheduler.step();  // micro-step: the optimizer did not step
  }
  EXPECT_DOUBLE_EQ(accel_test::learning_rate(optimizer), 1.0);
  {
    auto step = accelerator.accumulate(model);
    optimizer.step();
    scheduler.step();
  }
  EXPECT_DOUBLE_EQ(accel_test::learning_rate(optimizer), 0.9);
}

TEST(Accelerator, MovedOptimizerStaysGated) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().gradient_accumulation_steps(2));
  RegressionModel model;
  accelerator.prepare(model);
  auto prepared = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  std::vector<accel::AcceleratedOptimizer<torch::optim::SGD>> holder;
  holder.push_back(std::move(prepared));
  {
    auto step = accelerator.accumulate(model);
    accelerator.backward(model->forward(torch::ones({1, 1})).sum());
    step_through_base(holder[0]);
  }
  EXPECT_DOUBLE_EQ(model->a.grad().item<double>(), 0.5);
  EXPECT_EQ(holder[0].param_groups()[0].params().size(), 2u);
}

TEST(Accelerator, OneProcessOperationsAreIdentities) {
  accel::Accelerator accelerator;
  auto t = torch::arange(2) + 1;
  EXPECT_TRUE(torch::equal(accelerator.gather(t), t));
  EXPECT_TRUE(torch::equal(accelerator.reduce(t, accel::Reduction::Mean), t));
  EXPECT_TRUE(torch::equal(accelerator.broadcast(t), t));
  EXPECT_TRUE(torch::equal(accelerator.pad_across_processes(t), t));
  EXPECT_EQ(accelerator.gather_object(std::string("x")), (std::vector<std::string>{"x"}));
  std::vector<int64_t> items(17);
  EXPECT_EQ(accelerator.split_between_processes(items).size(), 17u);
  EXPECT_FALSE(accelerator.check_trigger());
  accelerator.set_trigger();
  EXPECT_TRUE(accelerator.check_trigger());
  EXPECT_FALSE(accelerator.check_trigger());
  int runs = 0;
  accelerator.main_process_first([&] { ++runs; });
  accelerator.on_main_process([&] { ++runs; });
  EXPECT_EQ(runs, 2);
  accelerator.wait_for_everyone();
}

TEST(Accelerator, GatherForMetricsOnOneProcessKeepsEverySample) {
  accel::Accelerator accelerator;
  auto loader = accelerator.prepare_data_loader<Sequential>(RangeDataset(9), 5);
  std::vector<int64_t> seen;
  for (auto& batch : *loader) {
    auto all = accelerator.gather_for_metrics(batch);
    seen.insert(seen.end(), all.begin(), all.end());
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(Accelerator, LoaderShufflesBySeedAndEpochAndCanSkip) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().seed(5));
  auto loader = accelerator.prepare(torch::data::make_data_loader(RangeDataset(10), 10));
  auto first_epoch = *loader->begin();
  for (auto& batch : *loader) (void)batch;
  auto second_epoch = *loader->begin();
  EXPECT_NE(first_epoch, second_epoch);
  loader->set_epoch(0);
  EXPECT_EQ(*loader->begin(), first_epoch);

  auto sequential = accelerator.prepare_data_loader<Sequential>(RangeDataset(10), 2);
  accelerator.skip_first_batches(*sequential, 3);
  std::vector<std::vector<int64_t>> batches;
  for (auto& batch : *sequential) batches.push_back(batch);
  EXPECT_EQ(batches, (std::vector<std::vector<int64_t>>{{6, 7}, {8, 9}}));
  EXPECT_EQ(sequential->size(), 5u);
}

// Without a seed option, a prepared shuffling loader on one process draws the same orders as a
// plain LibTorch loader and leaves the default generator where the plain program would have it,
// so a migrated program reproduces its original.
TEST(Accelerator, UnseededLoaderShufflesAsPlainLibTorchOnOneProcess) {
  using Random = torch::data::samplers::RandomSampler;
  auto epochs_of = [](auto& loader) {
    std::vector<std::vector<int64_t>> epochs;
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::vector<int64_t> order;
      for (auto& batch : *loader) order.insert(order.end(), batch.begin(), batch.end());
      epochs.push_back(order);
    }
    return epochs;
  };
  torch::manual_seed(3);
  auto plain = torch::data::make_data_loader<Random>(RangeDataset(50), 8);
  const auto plain_epochs = epochs_of(plain);
  const auto plain_next = torch::rand({4});

  torch::manual_seed(3);
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  auto prepared = accelerator.prepare_data_loader<Random>(RangeDataset(50), 8);
  EXPECT_EQ(epochs_of(prepared), plain_epochs);
  EXPECT_TRUE(torch::equal(torch::rand({4}), plain_next));
  EXPECT_NE(plain_epochs[0], plain_epochs[1]);

  // Taking over a loader LibTorch built: its sampler drew a permutation already, and the prepared
  // loader's own must not draw a second one.
  torch::manual_seed(3);
  auto taken = accelerator.prepare(torch::data::make_data_loader<Random>(RangeDataset(50), 8));
  EXPECT_EQ(epochs_of(taken), plain_epochs);
  EXPECT_TRUE(torch::equal(torch::rand({4}), plain_next));
}

// A dataset whose reads take uneven time, so that worker threads finish out of order.
class SlowRangeDataset : public torch::data::datasets::Dataset<SlowRangeDataset, int64_t> {
 public:
  explicit SlowRangeDataset(size_t size, size_t fail_at = SIZE_MAX)
      : size_(size), fail_at_(fail_at) {}
  int64_t get(size_t index) override {
    TORCH_CHECK(index != fail_at_, "sample ", index, " is unreadable");
    std::this_thread::sleep_for(std::chrono::microseconds((index * 7919) % 13 * 200));
    return static_cast<int64_t>(index);
  }
  torch::optional<size_t> size() const override { return size_; }

 private:
  size_t size_;
  size_t fail_at_;
};

// workers(n) and max_jobs as in LibTorch: the same batches in the same order as with 0 workers,
// epoch after epoch, after a loop left early, and from a resume position.
TEST(Accelerator, LoaderWorkersKeepTheOrderOfZeroWorkers) {
  using Random = torch::data::samplers::RandomSampler;
  auto read = [](auto& loader, size_t limit = SIZE_MAX) {
    std::vector<std::vector<int64_t>> batches;
    for (auto& batch : *loader) {
      if (batches.size() == limit) break;
      batches.push_back(batch);
    }
    return batches;
  };
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  auto serial = accelerator.prepare_data_loader<Random>(SlowRangeDataset(60), 4);
  auto threaded = accelerator.prepare_data_loader<Random>(
      SlowRangeDataset(60), torch::data::DataLoaderOptions(4).workers(3).max_jobs(5));
  // Each epoch draws its order from the default generator: both loaders draw from one seed.
  auto compare = [&](uint64_t seed, size_t limit = SIZE_MAX) {
    torch::manual_seed(seed);
    const auto with_workers = read(threaded, limit);
    torch::manual_seed(seed);
    const auto without = read(serial, limit);
    EXPECT_EQ(with_workers, without);
    return with_workers;
  };
  EXPECT_EQ(compare(1).size(), 15u);
  EXPECT_NE(compare(2), compare(3));
  // Left after 3 batches: the next epoch starts cleanly.
  EXPECT_EQ(compare(4, 3).size(), 3u);
  compare(5);
  serial->skip_first_batches(7);
  threaded->skip_first_batches(7);
  EXPECT_EQ(compare(6).size(), 15u - 7u);
}

TEST(Accelerator, LoaderWorkersErrorReachesTheLoop) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  auto loader = accelerator.prepare_data_loader<Sequential>(
      SlowRangeDataset(20, /*fail_at=*/9), torch::data::DataLoaderOptions(2).workers(2));
  size_t read = 0;
  try {
    for (auto& batch : *loader) read += batch.size();
    ADD_FAILURE() << "expected the worker's error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 9 is unreadable"), std::string::npos);
  }
  EXPECT_EQ(read, 8u);
}

TEST(Accelerator, LoaderWithWorkersCannotBeTakenOver) {
  accel::Accelerator accelerator;
  auto loader = torch::data::make_data_loader<Sequential>(
      RangeDataset(4), torch::data::DataLoaderOptions(2).workers(1));
  try {
    accelerator.prepare(std::move(loader));
    ADD_FAILURE() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("prepare_data_loader"), std::string::npos);
  }
}

// A program that holds its model and optimizer by pointer (`new`, unique_ptr, shared_ptr) trains
// through the pointers as the holder form does: accumulation through `torch::optim::SGD*` (the
// base's zero_grad included) equals the larger batch, and the model was prepared in place.
TEST(Accelerator, ModelsAndOptimizersHeldByPointerAreGatedAsHeldByValue) {
  const auto expected = train_plain(16, 3);
  accel::Accelerator accelerator(accel::AcceleratorOptions().gradient_accumulation_steps(2));
  auto* model = new RegressionModel();
  accelerator.prepare(model);
  torch::optim::SGD* optimizer =
      accelerator.prepare(new torch::optim::SGD((*model)->parameters(), 0.1));
  std::unique_ptr<torch::optim::SGD> unique =
      accelerator.prepare(std::make_unique<torch::optim::SGD>((*model)->parameters(), 0.1));
  std::shared_ptr<torch::optim::Optimizer> shared =
      accelerator.prepare(std::make_shared<torch::optim::SGD>((*model)->parameters(), 0.1));
  ASSERT_NE(dynamic_cast<accel::AcceleratedOptimizer<torch::optim::SGD>*>(unique.get()), nullptr);
  ASSERT_NE(dynamic_cast<accel::AcceleratedOptimizer<torch::optim::SGD>*>(shared.get()), nullptr);
  auto loader = accelerator.prepare_data_loader<Sequential>(
      RegressionDataset().map(torch::data::transforms::Stack<>()), 8);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch : *loader) {
      auto step = accelerator.accumulate(model);
      accelerator.backward(torch::mse_loss((*model)->forward(batch.data), batch.target));
      optimizer->step();
      optimizer->zero_grad();
    }
  }
  EXPECT_NEAR((*model)->a.item<double>(), expected.first, 1e-6);
  EXPECT_NEAR((*model)->b.item<double>(), expected.second, 1e-6);
  delete optimizer;
  delete model;
  auto held_twice = std::make_shared<torch::optim::SGD>(std::vector<torch::Tensor>{}, 0.1);
  auto other_owner = held_twice;
  EXPECT_THROW(accelerator.prepare(held_twice), c10::Error);
}

// Code with no Accelerator in reach (a model's own save method) asks the process's state.
TEST(ProcessState, ReadsTheLaunchersEnvironmentWithoutAnAccelerator) {
  const accel::ProcessState& state = accel::state();
  EXPECT_EQ(&state, &accel::state());
  accel::Accelerator accelerator;
  EXPECT_EQ(state.process_index(), accelerator.process_index());
  EXPECT_EQ(state.num_processes(), accelerator.num_processes());
  EXPECT_EQ(state.is_main_process(), accelerator.is_main_process());
  EXPECT_EQ(state.is_local_main_process(), accelerator.is_local_main_process());
}

TEST(Accelerator, AnEmptyModelIsAClearError) {
  accel::Accelerator accelerator;
  const auto expect_error = [](auto&& prepare, const std::string& expected) {
    try {
      prepare();
      ADD_FAILURE() << "expected an error";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  std::shared_ptr<torch::nn::LinearImpl> pointer;
  expect_error([&] { accelerator.prepare(pointer); }, "the model is an empty pointer");
  torch::nn::Linear holder{nullptr};
  expect_error([&] { accelerator.prepare(holder); }, "the model is empty");
  torch::nn::LinearImpl* raw = nullptr;
  expect_error([&] { accelerator.prepare(raw); }, "the model is a null pointer");
  torch::optim::SGD* no_optimizer = nullptr;
  expect_error([&] { accelerator.prepare(no_optimizer); }, "was given a null optimizer");
}

TEST(Accelerator, ClipGradNormReturnsTheTotalNorm) {
  accel::Accelerator accelerator;
  RegressionModel model;
  accelerator.prepare(model);
  accelerator.backward((model->forward(torch::full({1, 1}, 3.0)) * 4).sum());
  // grads: a = 12, b = 4 -> norm sqrt(160)
  const double norm = accelerator.clip_grad_norm_(model->parameters(), 1.0);
  EXPECT_NEAR(norm, std::sqrt(160.0), 1e-5);
  EXPECT_NEAR(torch::cat({model->a.grad(), model->b.grad()}).norm().item<double>(), 1.0, 1e-5);
  accelerator.clip_grad_value_(model->parameters(), 0.1);
  EXPECT_LE(model->a.grad().abs().item<double>(), 0.1 + 1e-7);
}

using accel_test::EnvGuard;

TEST(AcceleratorOptions, EnvironmentFillsWhatCodeLeavesUnset) {
  EnvGuard steps("ACCEL_GRADIENT_ACCUMULATION_STEPS", "3");
  EnvGuard split("ACCEL_SPLIT_BATCHES", "true");
  auto from_env = accel::resolve_options(accel::AcceleratorOptions());
  EXPECT_EQ(from_env.gradient_accumulation_steps, 3);
  EXPECT_TRUE(from_env.split_batches);
  EXPECT_TRUE(from_env.even_batches);
  auto in_code = accel::resolve_options(
      accel::AcceleratorOptions().gradient_accumulation_steps(2).split_batches(false));
  EXPECT_EQ(in_code.gradient_accumulation_steps, 2);
  EXPECT_FALSE(in_code.split_batches);
}

TEST(AcceleratorOptions, DdpOptionsForModelsThatLeaveParametersOut) {
  auto defaults = accel::resolve_options(accel::AcceleratorOptions());
  EXPECT_FALSE(*defaults.ddp.find_unused_parameters());
  EXPECT_FALSE(*defaults.ddp.static_graph());
  {
    EnvGuard unused("ACCEL_DDP_FIND_UNUSED_PARAMETERS", "true");
    EXPECT_TRUE(*accel::resolve_options(accel::AcceleratorOptions()).ddp.find_unused_parameters());
    // Code wins over the environment, which alone would set both.
    EnvGuard fixed("ACCEL_DDP_STATIC_GRAPH", "true");
    const auto in_code = accel::resolve_options(accel::AcceleratorOptions().ddp(
        accel::DistributedDataParallelOptions().find_unused_parameters(false)));
    EXPECT_FALSE(*in_code.ddp.find_unused_parameters());
    EXPECT_TRUE(*in_code.ddp.static_graph());
    try {
      accel::resolve_options(accel::AcceleratorOptions());
      ADD_FAILURE() << "find_unused_parameters and static_graph were both taken";
    } catch (const c10::Error& e) {
      const std::string message = e.what_without_backtrace();
      EXPECT_NE(message.find("find_unused_parameters and static_graph are both set"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("ACCEL_DDP_STATIC_GRAPH"), std::string::npos) << message;
    }
  }
}

TEST(AcceleratorOptions, BadValuesNameTheSettingAndTheExpectation) {
  auto message = [](const accel::AcceleratorOptions& options) {
    try {
      accel::resolve_options(options);
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string();
  };
  EXPECT_NE(message(accel::AcceleratorOptions().gradient_accumulation_steps(0))
                .find("accel: invalid gradient_accumulation_steps: 0"),
            std::string::npos);
  EXPECT_NE(
      message(accel::AcceleratorOptions().mixed_precision("fp32"))
          .find("accel: invalid mixed_precision: 'fp32' (expected one of no, bf16, fp16, fp8)"),
      std::string::npos);
  EXPECT_NE(message(accel::AcceleratorOptions().ddp(
                        accel::DistributedDataParallelOptions().bucket_cap_mb(0)))
                .find("accel: invalid ddp.bucket_cap_mb: 0 (expected an integer >= 1)"),
            std::string::npos);
  // A hook named in code is parsed where it is set.
  try {
    accel::DistributedDataParallelOptions().comm_hook("power_sgd");
    ADD_FAILURE() << "comm_hook(\"power_sgd\") was taken";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what_without_backtrace())
            .find("accel: invalid ddp.comm_hook: 'power_sgd' (expected one of no, fp16, bf16"),
        std::string::npos);
  }
  EXPECT_NE(message(accel::AcceleratorOptions().rng_types({"generator", "xla"}))
                .find("accel: invalid rng_types: 'xla' (expected generator, torch or cuda)"),
            std::string::npos);
  EXPECT_NE(message(accel::AcceleratorOptions().sharding_strategy("ZERO_3"))
                .find("accel: invalid sharding_strategy: 'ZERO_3' (expected one of NO_SHARD, "
                      "SHARD_OPTIMIZER_STATE, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD)"),
            std::string::npos);
  EXPECT_NE(message(accel::AcceleratorOptions()
                        .fsdp_transformer_layer_cls_to_wrap({"Block"})
                        .fsdp_min_num_params(1000))
                .find("two auto-wrap policies; set one"),
            std::string::npos);
  EXPECT_NE(message(accel::AcceleratorOptions().fsdp_min_num_params(0))
                .find("accel: invalid fsdp_min_num_params: 0 (expected an integer >= 1)"),
            std::string::npos);
  // CPU offload moves the shards of a sharded run: without sharding there are none.
  EXPECT_NE(message(accel::AcceleratorOptions().fsdp_offload_params(true))
                .find("fsdp_offload_params keeps the shards of a sharded run in host memory, and "
                      "sharding_strategy is NO_SHARD"),
            std::string::npos);
  EXPECT_EQ(message(accel::AcceleratorOptions().fsdp_offload_params(true).sharding_strategy(
                "SHARD_GRAD_OP")),
            "");
  {
    EnvGuard offload("ACCEL_FSDP_OFFLOAD_PARAMS", "maybe");
    EXPECT_NE(message(accel::AcceleratorOptions().sharding_strategy("FULL_SHARD"))
                  .find("accel: invalid ACCEL_FSDP_OFFLOAD_PARAMS: 'maybe'"),
              std::string::npos);
  }
  EnvGuard bad("ACCEL_USE_CPU", "sometimes");
  EXPECT_NE(message(accel::AcceleratorOptions()).find("accel: invalid ACCEL_USE_CPU: 'sometimes'"),
            std::string::npos);
}

}  // namespace
