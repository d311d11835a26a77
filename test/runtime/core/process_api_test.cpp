// The Accelerator API's multi-process helpers on 2 real processes (accel launch): which process
// runs what, rank-ordered log lines, per-process seeds, gathering variable-length tensors as
// objects, save() from one process, get_state_dict of a FULL_SHARD model, and profile traces.

#include <accel/accel.h>
#include <torch/torch.h>

#include "support/read_text.h"
#include "support/temp_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using accel_test::read_text;

// Outside the anonymous namespace: gtest derives each test from it (GCC's -Wsubobject-linkage
// objects to a base with internal linkage in a file that is not the main one, as in a unity
// build's batch).
class TwoProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_STREQ(std::getenv("WORLD_SIZE"), "2") << "run me with accel launch --num_processes 2";
  }
};

namespace {

int64_t rank() { return std::atoll(std::getenv("RANK")); }

// A folder both processes use: rank 0's temporary folder, removed by rank 0 at the end.
class SharedDir {
 public:
  explicit SharedDir(accel::Accelerator& accelerator) : accelerator_(accelerator) {
    if (accelerator.is_main_process()) owned_ = std::make_unique<accel_test::TempDir>("accel_api");
    path_ = accelerator.broadcast_object(owned_ ? owned_->path().string() : std::string());
  }
  ~SharedDir() { accelerator_.wait_for_everyone(); }
  fs::path operator/(const std::string& name) const { return fs::path(path_) / name; }

 private:
  accel::Accelerator& accelerator_;
  std::unique_ptr<accel_test::TempDir> owned_;
  std::string path_;
};

// Rows of x with their targets.
class Pairs : public torch::data::datasets::Dataset<Pairs> {
 public:
  Pairs(torch::Tensor x, torch::Tensor y) : x_(std::move(x)), y_(std::move(y)) {}
  torch::data::Example<> get(size_t i) override {
    return {x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(x_.size(0)); }

 private:
  torch::Tensor x_, y_;
};

}  // namespace

TEST_F(TwoProcesses, EachHelperRunsOnItsProcesses) {
  accel::Accelerator accelerator;
  EXPECT_EQ(accelerator.is_last_process(), rank() == 1);
  EXPECT_EQ(accelerator.local_num_processes(), 2);
  std::vector<std::string> ran;
  accelerator.on_main_process([&] { ran.push_back("main"); });
  accelerator.on_local_main_process([&] { ran.push_back("local main"); });
  accelerator.on_last_process([&] { ran.push_back("last"); });
  accelerator.on_process(1, [&] { ran.push_back("process 1"); });
  accelerator.on_local_process(1, [&] { ran.push_back("local 1"); });
  const auto everyone = accelerator.gather_object(ran);
  EXPECT_EQ(everyone,
            (std::vector<std::string>{"main", "local main", "last", "process 1", "local 1"}));
  EXPECT_THROW(accelerator.on_process(2, [] {}), c10::Error);
}

TEST_F(TwoProcesses, LocalMainProcessFirstRunsItsScopeBeforeTheOthers) {
  accel::Accelerator accelerator;
  SharedDir dir(accelerator);
  const auto marker = dir / "prepared";
  accelerator.local_main_process_first([&] {
    if (accelerator.is_local_main_process()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a slow download
      std::ofstream(marker) << "done";
    } else {
      EXPECT_EQ(read_text(marker), "done") << "process 1 ran before the local main process ended";
    }
  });
}

TEST_F(TwoProcesses, InRankOrderLinesComeOutInRankOrder) {
  accel::Accelerator accelerator;
  SharedDir dir(accelerator);
  const auto log_path = dir / "log.txt";
  // Both processes' stderr goes to one file, appended to line by line.
  const int saved_stderr = ::dup(2);
  const int file = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(file, 0);
  ::dup2(file, 2);
  auto logger = accel::get_logger("api_test", accel::LogLevel::Info);
  for (int round = 0; round < 3; ++round) {
    // Rank 0 is slow: without the turns, rank 1's line would come first.
    if (rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    logger.info(accel::in_rank_order, "round {} from {}", round, rank());
  }
  logger.info("main only");
  logger.warning(accel::all_processes, "everyone");
  accelerator.wait_for_everyone();
  ::dup2(saved_stderr, 2);
  ::close(saved_stderr);
  ::close(file);

  if (rank() != 0) return;
  std::vector<std::string> lines;
  std::istringstream text(read_text(log_path));
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 9u) << read_text(log_path);
  for (int i = 0; i < 6; ++i) {
    const std::string expected = "[rank " + std::to_string(i % 2) + "] [info] api_test: round " +
                                 std::to_string(i / 2) + " from " + std::to_string(i % 2);
    EXPECT_NE(lines[i].find(expected), std::string::npos) << lines[i];
  }
  // The last three in any order: after the turns each process writes as soon as it logs.
  std::multiset<std::string> rest;
  for (int i = 6; i < 9; ++i) rest.insert(lines[i].substr(lines[i].find("] [rank ") + 2));
  EXPECT_EQ(rest, (std::multiset<std::string>{"[rank 0] [info] api_test: main only",
                                              "[rank 0] [warning] api_test: everyone",
                                              "[rank 1] [warning] api_test: everyone"}));
}

TEST_F(TwoProcesses, DeviceSpecificSeedsDifferAndPlainSeedsAgree) {
  accel::Accelerator accelerator;
  accel::set_seed(11);
  auto same = accelerator.gather_object(torch::randn({3}));
  EXPECT_TRUE(torch::equal(same[0], same[1]));
  accel::set_seed(11, /*device_specific=*/true);
  auto mine = torch::randn({3});
  auto different = accelerator.gather_object(mine);
  EXPECT_FALSE(torch::equal(different[0], different[1]));
  accel::set_seed(11 + rank());
  EXPECT_TRUE(torch::equal(mine, torch::randn({3}))) << "device_specific adds the process index";
}

TEST_F(TwoProcesses, GatherForMetricsAsObjectsTakesDifferentLengths) {
  accel::Accelerator accelerator;
  // Rank 0 predicted 3 tokens, rank 1 one: an all-gather needs equal shapes, objects do not.
  const auto mine = rank() == 0 ? torch::tensor({1, 2, 3}) : torch::tensor({4});
  const auto all = accelerator.gather_for_metrics(mine, /*use_gather_object=*/true);
  EXPECT_TRUE(torch::equal(all, torch::tensor({1, 2, 3, 4}))) << all;
  const auto equal = accelerator.gather_for_metrics(torch::tensor({rank()}), false);
  EXPECT_TRUE(torch::equal(equal, torch::tensor({0, 1})));
}

TEST_F(TwoProcesses, SaveWritesFromTheMainProcessOnly) {
  accel::Accelerator accelerator;
  SharedDir dir(accelerator);
  const auto mine = dir / ("from_" + std::to_string(rank()) + ".pt");
  accelerator.save(torch::full({2}, static_cast<double>(rank())), mine.string());
  accelerator.wait_for_everyone();
  EXPECT_TRUE(fs::exists(dir / "from_0.pt"));
  EXPECT_FALSE(fs::exists(dir / "from_1.pt"));
}

TEST_F(TwoProcesses, GetStateDictGathersAFullShardModelOnTheMainProcess) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().sharding_strategy("FULL_SHARD"));
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(6, 10), torch::nn::ReLU(),
                              torch::nn::Linear(10, 3));
  std::vector<torch::Tensor> whole;
  for (const auto& p : model->parameters()) whole.push_back(p.detach().clone());
  accelerator.prepare(model);
  // FULL_SHARD cuts the parameters when their optimizer is prepared.
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  const auto state = accelerator.get_state_dict(model);
  if (rank() != 0) {
    EXPECT_TRUE(state.empty());
    return;
  }
  ASSERT_EQ(state.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_TRUE(state[i].second.device().is_cpu());
    EXPECT_TRUE(torch::equal(state[i].second, whole[i])) << state[i].first;
  }
}

TEST_F(TwoProcesses, ProfileWritesOneTracePerProcess) {
  accel::Accelerator accelerator;
  SharedDir dir(accelerator);
  {
    auto profile =
        accelerator.profile(accel::ProfileOptions().output_trace_dir((dir / "traces").string()));
    torch::mm(torch::randn({32, 32}), torch::randn({32, 32}));
  }  // stops, writes, and waits for the other process
  const auto trace = read_text(dir / "traces" / ("profile_" + std::to_string(rank()) + ".json"));
  EXPECT_NE(trace.find("\"aten::mm\""), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "traces" / ("profile_" + std::to_string(1 - rank()) + ".json")));
}

namespace {

/// The uneven-inputs tests' job: a Linear(3, 1) from zeros, prepared with SGD(0.5) and a
/// sequential loader of batches of 2 over (x, y), beside an unprepared reference from zeros that
/// a test steps by hand.
struct JoinedLinear {
  JoinedLinear(torch::Tensor inputs, torch::Tensor targets)
      : x(std::move(inputs)),
        y(std::move(targets)),
        model(zeros()),
        reference(zeros()),
        optimizer(accelerator.prepare(sgd_of_prepared_model())),
        loader(accelerator.prepare_data_loader<torch::data::samplers::SequentialSampler>(
            Pairs(x, y).map(torch::data::transforms::Stack<>()), 2)) {}
  torch::optim::SGD sgd_of_prepared_model() {
    accelerator.prepare(model);
    return torch::optim::SGD(model->parameters(), 0.5);
  }
  static torch::nn::Linear zeros() {
    torch::nn::Linear linear(3, 1);
    torch::nn::init::zeros_(linear->weight);
    torch::nn::init::zeros_(linear->bias);
    return linear;
  }
  /// `epochs` epochs of this process's batches in one join scope, even_batches off; the number
  /// of batches this process trained on.
  int64_t train_joined(int epochs) {
    int64_t batches = 0;
    auto join = accelerator.join_uneven_inputs(/*even_batches=*/false, model);
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (auto& batch : *loader) {
        accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
        optimizer.step();
        optimizer.zero_grad();
        ++batches;
      }
    }
    return batches;
  }
  /// One SGD step of the reference with `gradients` (weight, bias) summed over a round's
  /// batches, divided by the job's 2 processes as the joined model's are.
  void step_reference(const torch::Tensor& weight_gradient, const torch::Tensor& bias_gradient) {
    torch::NoGradGuard no_grad;
    reference->weight -= 0.5 * weight_gradient / 2;
    reference->bias -= 0.5 * bias_gradient / 2;
  }
  void expect_model_is_reference() const {
    EXPECT_TRUE(torch::allclose(model->weight, reference->weight, 0, 1e-6))
        << model->weight << reference->weight;
    EXPECT_TRUE(torch::allclose(model->bias, reference->bias, 0, 1e-6));
  }

  accel::Accelerator accelerator;
  torch::Tensor x, y;
  torch::nn::Linear model, reference;
  accel::AcceleratedOptimizer<torch::optim::SGD> optimizer;
  using Batches = torch::data::datasets::MapDataset<Pairs, torch::data::transforms::Stack<>>;
  std::unique_ptr<accel::DataLoader<Batches, torch::data::samplers::SequentialSampler>> loader;
};

}  // namespace

// 5 batches of 2 with even_batches off: rank 0 trains on batches 0, 2, 4 and rank 1 on 1 and 3.
// Rank 1 runs out first and shadows rank 0's third all-reduce with zeros; both end with rank 0's
// model, whose third step used half its own gradient (divided by the job's 2 processes).
TEST_F(TwoProcesses, JoinUnevenInputsTrainsOnWithoutHanging) {
  auto x = torch::arange(30, torch::kFloat).reshape({10, 3}) / 30;
  JoinedLinear job(x, x.sum(1, true) * 2 + 1);
  EXPECT_EQ(job.train_joined(1), rank() == 0 ? 3 : 2);

  // The same steps on one process: mean gradients of batch pairs (0, 1), (2, 3), then (4, none).
  auto& reference = job.reference;
  auto gradient_of = [&](int64_t b) {
    reference->zero_grad();
    auto data = job.x.narrow(0, 2 * b, 2), target = job.y.narrow(0, 2 * b, 2);
    torch::mse_loss(reference->forward(data), target).backward();
    return std::vector<torch::Tensor>{reference->weight.grad().clone(),
                                      reference->bias.grad().clone()};
  };
  for (auto pair : std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}}) {
    std::vector<torch::Tensor> sum{torch::zeros({1, 3}), torch::zeros({1})};
    for (auto b : pair) {
      auto g = gradient_of(b);
      sum[0] += g[0];
      sum[1] += g[1];
    }
    job.step_reference(sum[0], sum[1]);
  }
  job.expect_model_is_reference();
  // The scope ended on every process together, and a later epoch is even again.
  EXPECT_EQ(job.loader->size(), 3u);
}

// One batch of 2 with even_batches off, two epochs in one scope: rank 1 gets no batch at all,
// trains nothing and shadows rank 0's two all-reduces from end_join (the second comes with the
// reducer's bucket rebuild, a collective of its own). Both end with rank 0's model, whose steps
// used half its gradient (divided by the job's 2 processes).
TEST_F(TwoProcesses, JoinUnevenInputsWithNoBatchOnOneProcess) {
  auto x = torch::tensor({{0.1F, 0.2F, 0.3F}, {0.4F, 0.5F, 0.6F}});
  JoinedLinear job(x, x.sum(1, true) * 2 + 1);
  EXPECT_EQ(job.train_joined(2), rank() == 0 ? 2 : 0);
  for (int step = 0; step < 2; ++step) {
    job.reference->zero_grad();
    torch::mse_loss(job.reference->forward(job.x), job.y).backward();
    job.step_reference(job.reference->weight.grad(), job.reference->bias.grad());
  }
  job.expect_model_is_reference();
}

// A StepLR stepped once after each epoch, prepared per_epoch: on 2 processes, with accumulation,
// the rate after each epoch is the one-process program's (0.1, 0.05, 0.025: LibTorch's StepLR
// changes nothing on its first step), and a job resumed from a checkpoint taken after epoch 1
// goes on from there. The default (with_optimizer) steps it num_processes() times a call.
TEST_F(TwoProcesses, PerEpochSchedulerKeepsItsEpochsAndResumes) {
  auto x = torch::arange(32, torch::kFloat).reshape({16, 2}) / 32;
  auto run = [&](const std::string& checkpoint, int first_epoch, int last_epoch) {
    accel::Accelerator accelerator(accel::AcceleratorOptions().gradient_accumulation_steps(2));
    torch::nn::Linear model(2, 1);
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
    auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, 1, 0.5),
                                         accel::SchedulerStepping::per_epoch);
    auto loader = accelerator.prepare_data_loader(
        Pairs(x, x.sum(1, true)).map(torch::data::transforms::Stack<>()), 2);
    if (first_epoch > 0) accelerator.load_state(checkpoint);
    std::vector<double> rates;
    for (int epoch = first_epoch; epoch <= last_epoch; ++epoch) {
      for (auto& batch : *loader) {
        auto step = accelerator.accumulate(model);
        accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
        optimizer.step();
        optimizer.zero_grad();
      }
      scheduler.step();
      rates.push_back(optimizer.param_groups()[0].options().get_lr());
      if (epoch == 1 && first_epoch == 0) accelerator.save_state(checkpoint);
    }
    return rates;
  };
  accel::Accelerator shared;
  SharedDir dir(shared);
  const std::string checkpoint = (dir / "checkpoint").string();
  const auto rates = run(checkpoint, 0, 2);
  ASSERT_EQ(rates.size(), 3u);
  EXPECT_DOUBLE_EQ(rates[0], 0.1);  // LibTorch's StepLR changes nothing on its first step
  EXPECT_DOUBLE_EQ(rates[1], 0.05);
  EXPECT_DOUBLE_EQ(rates[2], 0.025);
  const auto resumed = run(checkpoint, 2, 3);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_DOUBLE_EQ(resumed[0], 0.025);
  EXPECT_DOUBLE_EQ(resumed[1], 0.0125);
}
