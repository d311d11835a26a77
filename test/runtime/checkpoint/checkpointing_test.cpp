// safetensors writing and reading, save_model's sharding, save_state's naming and limits, and the
// errors for malformed files, on one process.

#include <accel/accel.h>

#include <gtest/gtest.h>

#include "format_fixture.h"
#include "support/datasets.h"
#include "support/temp_dir.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

namespace fs = std::filesystem;

using accel_test::TempDir;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(Safetensors, ByteLayoutIsTheReferenceFormat) {
  TempDir dir;
  accel::save_safetensors(
      (dir / "a.safetensors").string(),
      {{"b", torch::tensor({1.0f, 2.0f})}, {"a", torch::tensor({7}, torch::kInt16)}});
  // Hand-computed: JSON header with sorted names and byte ranges, padded with spaces to a
  // multiple of 8, its length as 8 little-endian bytes in front, then a's 2 bytes and b's 8.
  std::string json = R"({"a":{"data_offsets":[0,2],"dtype":"I16","shape":[1]},)"
                     R"("b":{"data_offsets":[2,10],"dtype":"F32","shape":[2]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string expected(8, '\0');
  expected[0] = static_cast<char>(json.size());
  expected += json;
  expected += std::string("\x07\x00", 2);
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f
  EXPECT_TRUE(read_bytes(dir / "a.safetensors") == expected);
}

TEST(Safetensors, EveryLibTorchDtypeRoundTrips) {
  TempDir dir;
  accel::NamedTensors tensors;
  for (auto type :
       {torch::kBool, torch::kUInt8, torch::kInt8, torch::kInt16, torch::kInt32, torch::kInt64,
        torch::kFloat16, torch::kBFloat16, torch::kFloat32, torch::kFloat64}) {
    auto t = (torch::arange(12, torch::kFloat64).reshape({3, 4}) - 5).to(type);
    tensors.emplace_back(c10::toString(type), t);
  }
  tensors.emplace_back("empty", torch::zeros({0, 3}));
  tensors.emplace_back("scalar", torch::tensor(2.5));
  tensors.emplace_back("strided", torch::arange(16, torch::kFloat32).reshape({4, 4}).t());
  const auto path = (dir / "all.safetensors").string();
  accel::save_safetensors(path, tensors, {{"format", "pt"}});
  const auto loaded = accel::load_safetensors(path);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& entry : tensors) {
    const auto& got = loaded.at(entry.first);
    EXPECT_EQ(got.scalar_type(), entry.second.scalar_type()) << entry.first;
    EXPECT_TRUE(torch::equal(got, entry.second)) << entry.first;
  }
}

TEST(Safetensors, LoadedTensorsViewTheMappingWithoutCopying) {
  TempDir dir;
  const auto path = (dir / "big.safetensors").string();
  accel::save_safetensors(path, {{"w", torch::ones({256, 256})}});
  auto loaded = accel::load_safetensors(path);
  auto w = loaded.at("w");
  const auto* first = static_cast<const char*>(w.data_ptr());
  // The data lies right after the header inside the mapping: its address is 8-byte aligned, and
  // the storage is not an allocation of LibTorch's (whose context is the data itself) but a
  // view whose context holds the mapping.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 8, 0u);
  EXPECT_NE(w.storage().data_ptr().get_context(), w.storage().data_ptr().get());
  EXPECT_NE(torch::ones({2}).storage().data_ptr().get_context(), nullptr);
  loaded.clear();
  fs::remove(path);  // the mapping outlives the file and the map
  EXPECT_EQ(w.sum().item<double>(), 256.0 * 256.0);
  w.add_(1);  // copy-on-write: allowed, private
  EXPECT_EQ(w[0][0].item<double>(), 2.0);
}

TEST(Safetensors, MalformedFilesNameTheFileAndTheProblem) {
  TempDir dir;
  const auto good = (dir / "good.safetensors").string();
  accel::save_safetensors(good, {{"w", torch::ones({4})}});
  const auto bytes = read_bytes(good);
  struct Case {
    std::string name;
    std::string bytes;
    std::string message;
  };
  std::string huge_length = bytes;
  huge_length[5] = 1;  // header length far beyond the file
  std::string not_json = bytes;
  not_json[8] = '[';
  std::string bad_dtype = bytes;
  bad_dtype.replace(bad_dtype.find("F32"), 3, "F99");
  std::string out_of_range = bytes;
  out_of_range.replace(out_of_range.find("[0,16]"), 6, "[0,99]");
  std::string short_data = bytes;
  short_data.replace(short_data.find("[0,16]"), 6, "[0,12]");
  const std::vector<Case> cases = {
      {"truncated", bytes.substr(0, 5), "too short"},
      {"length", huge_length, "header"},
      {"json", not_json, "JSON"},
      {"dtype", bad_dtype, "F99"},
      {"range", out_of_range,
       "tensor 'w': data_offsets [0, 99) are outside the data buffer of 16 bytes"},
      {"shape", short_data, "tensor 'w': shape and dtype need 16 bytes but data_offsets span 12"},
      {"cut", bytes.substr(0, bytes.size() - 4),
       "tensor 'w': data_offsets [0, 16) are outside the data buffer of 12 bytes"}};
  for (const auto& c : cases) {
    const auto path = dir / (c.name + ".safetensors");
    write_bytes(path, c.bytes);
    const auto message = error_of([&] { accel::load_safetensors(path.string()); });
    EXPECT_NE(message.find(path.string()), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.message), std::string::npos) << c.name << ": " << message;
  }
  EXPECT_NE(error_of([&] { accel::load_safetensors((dir / "missing").string()); }).find("missing"),
            std::string::npos);
}

TEST(SaveModel, ParseSizeFollowsAccelerate) {
  EXPECT_EQ(accel::parse_size("100MB"), 100000000);
  EXPECT_EQ(accel::parse_size("10GB"), 10000000000);
  EXPECT_EQ(accel::parse_size("2GiB"), 2LL * 1024 * 1024 * 1024);
  EXPECT_EQ(accel::parse_size("512KiB"), 512 * 1024);
  EXPECT_EQ(accel::parse_size("5Gb"), 625000000);
  EXPECT_EQ(accel::parse_size("1234"), 1234);
  EXPECT_NE(error_of([] { accel::parse_size("lots"); }).find("invalid size 'lots'"),
            std::string::npos);
}

struct ThreeLayers : torch::nn::Module {
  ThreeLayers() {
    a = register_module("a", torch::nn::Linear(64, 64));  // 16640 bytes
    b = register_module("b", torch::nn::Linear(64, 64));
    c = register_module("c", torch::nn::Linear(64, 8));
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};

TEST(SaveModel, ShardsWithAnIndexAndRemovesStaleShards) {
  TempDir dir;
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  ThreeLayers model;
  accelerator.save_model(model, dir.path().string(),
                         accel::SaveModelOptions().max_shard_size("17000"));
  // In module order: a.weight 16384 + a.bias 256 | b.weight would pass 17000: a new shard,
  // b.weight + b.bias | c.weight (2048) would pass it again | c.weight + c.bias.
  const auto index = nlohmann::json::parse(read_bytes(dir / "model.safetensors.index.json"));
  const int64_t total = (64 * 64 + 64) * 2 * 4 + (64 * 8 + 8) * 4;
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  std::set<std::string> files;
  for (auto& entry : index["weight_map"].items()) files.insert(entry.value().get<std::string>());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(*files.begin(), "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["a.weight"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["c.bias"], "model-00003-of-00003.safetensors");
  // Round trip through the shards.
  ThreeLayers other;
  torch::NoGradGuard no_grad;
  for (const auto& file : files) {
    for (const auto& entry : accel::load_safetensors((dir / file).string())) {
      other.named_parameters()[entry.first].copy_(entry.second);
    }
  }
  for (const auto& p : model.named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), other.named_parameters()[p.key()])) << p.key();
  }
  // One shard now: the single file, and nothing of the sharded save is left.
  write_bytes(dir / "notes.txt", "kept");
  accelerator.save_model(model, dir.path().string());
  std::set<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    left.insert(entry.path().filename().string());
  }
  EXPECT_EQ(left, (std::set<std::string>{"model.safetensors", "notes.txt"}));
  // And back to shards: the single file goes.
  accelerator.save_model(model, dir.path().string(),
                         accel::SaveModelOptions().max_shard_size("17KB"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model-00003-of-00003.safetensors"));
}

TEST(SaveState, TotalLimitKeepsTheNewestCheckpoints) {
  TempDir dir;
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).project_config(accel::ProjectConfiguration()
                                                               .project_dir(dir.path().string())
                                                               .automatic_checkpoint_naming(true)
                                                               .total_limit(2)));
  torch::nn::Linear model(2, 2);
  accelerator.prepare(model);
  // Each checkpoint holds different weights (all i), so loading the wrong one shows.
  for (int i = 0; i < 11; ++i) {
    {
      torch::NoGradGuard no_grad;
      model->weight.fill_(i);
    }
    accelerator.save_state();
  }
  std::set<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir / "checkpoints")) {
    left.insert(entry.path().filename().string());
  }
  EXPECT_EQ(left, (std::set<std::string>{"checkpoint_9", "checkpoint_10"}));
  EXPECT_EQ(accelerator.project_configuration().iteration(), 11);

  // load_state() with no folder takes the newest: checkpoint_10, which sorts before checkpoint_9
  // as text.
  torch::NoGradGuard no_grad;
  model->weight.fill_(-1);
  accelerator.load_state();
  EXPECT_TRUE(torch::equal(model->weight, torch::full({2, 2}, 10.0))) << model->weight;
  // Automatic naming never overwrites: a stale iteration is refused.
  accelerator.project_configuration().iteration(10);
  EXPECT_NE(error_of([&] { accelerator.save_state(); }).find("already exists"), std::string::npos);
}

struct Counter {
  int64_t value = 0;
  void save(torch::serialize::OutputArchive& archive) const {
    archive.write("value", torch::tensor(value));
  }
  void load(torch::serialize::InputArchive& archive) {
    torch::Tensor t;
    archive.read("value", t);
    value = t.item<int64_t>();
  }
};

TEST(SaveState, RestoresRegisteredObjectsAndRefusesMismatches) {
  TempDir dir;
  const auto folder = (dir / "ckpt").string();
  {
    accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
    torch::nn::Linear model(2, 2);
    accelerator.prepare(model);
    Counter counter;
    counter.value = 41;
    accelerator.register_for_checkpointing(counter);
    EXPECT_EQ(accelerator.save_state(folder), folder);
    EXPECT_FALSE(fs::exists(folder + ".partial"));
    counter.value = 0;
    accelerator.load_state(folder);
    EXPECT_EQ(counter.value, 41);
  }
  {
    accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
    torch::nn::Linear model(2, 2);
    accelerator.prepare(model);
    const auto message = error_of([&] { accelerator.load_state(folder); });
    EXPECT_NE(message.find("holds 1 registered objects and this program prepared 0"),
              std::string::npos)
        << message;
  }
  {
    accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
    torch::nn::Linear model(3, 2);  // another shape
    accelerator.prepare(model);
    Counter counter;
    accelerator.register_for_checkpointing(counter);
    const auto message = error_of([&] { accelerator.load_state(folder); });
    EXPECT_NE(message.find("model.safetensors: tensor 'weight' has shape [2, 2]"),
              std::string::npos)
        << message;
  }
  // A corrupt model file is named.
  write_bytes(fs::path(folder) / "model.safetensors", "garbage!");
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  torch::nn::Linear model(2, 2);
  accelerator.prepare(model);
  Counter counter;
  accelerator.register_for_checkpointing(counter);
  const auto message = error_of([&] { accelerator.load_state(folder); });
  EXPECT_NE(message.find(folder + "/model.safetensors"), std::string::npos) << message;
  EXPECT_NE(error_of([&] {
              accelerator.load_state((dir / "none").string());
            }).find("is not a complete checkpoint"),
            std::string::npos);
}

/// A two-layer model, its AdamW optimizer after one step, and a checkpoint of them in `folder`.
struct CheckpointedTwoLayers {
  explicit CheckpointedTwoLayers(accel::Accelerator& accelerator, int64_t width = 3)
      : model(torch::nn::Linear(2, width), torch::nn::Linear(width, 1)),
        optimizer(accelerator.prepare(torch::optim::AdamW(model->parameters(), 0.1))) {
    accelerator.prepare(model);
  }
  void step(accel::Accelerator& accelerator) {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model->forward(torch::ones({4, 2})).sum());
    optimizer.step();
    optimizer.zero_grad();
  }
  torch::nn::Sequential model;
  accel::AcceleratedOptimizer<torch::optim::AdamW> optimizer;
};

// A checkpoint that does not fit the run is refused with the file and the difference named, before
// anything is loaded: the run's weights and optimizer state stay as they were.
TEST(SaveState, CheckpointsOfAnotherRunAreRefusedBeforeAnythingLoads) {
  TempDir dir;
  const auto folder = (dir / "ckpt").string();
  {
    accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
    CheckpointedTwoLayers run(accelerator);
    run.step(accelerator);
    accelerator.save_state(folder);
  }
  auto refused = [&](accel::Accelerator& accelerator, torch::nn::Module& model,
                     const std::string& expected) {
    std::vector<torch::Tensor> before;
    for (const auto& p : model.parameters()) before.push_back(p.detach().clone());
    const auto message = error_of([&] { accelerator.load_state(folder); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    const auto after = model.parameters();
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_TRUE(torch::equal(before[i], after[i]))
          << "parameter " << i << " changed: " << message;
    }
  };
  {
    // Another model: the first layer would fit, the second does not.
    accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
    CheckpointedTwoLayers run(accelerator, 4);
    refused(accelerator, *run.model, "model.safetensors: tensor '0.weight' has shape [3, 2]");
  }
  {
    // Another optimizer type.
    accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
    torch::nn::Sequential model(torch::nn::Linear(2, 3), torch::nn::Linear(3, 1));
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
    refused(accelerator, *model,
            "optimizer.pt holds the state of a torch::optim::AdamW and this run's optimizer 0 is "
            "a torch::optim::SGD");
  }
  {
    // Another number of parameter groups.
    accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
    torch::nn::Sequential model(torch::nn::Linear(2, 3), torch::nn::Linear(3, 1));
    accelerator.prepare(model);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(model[0]->parameters());
    groups.emplace_back(model[1]->parameters());
    auto optimizer = accelerator.prepare(torch::optim::AdamW(groups, {}));
    refused(accelerator, *model,
            "optimizer.pt holds 1 parameter groups and this run's optimizer 0 has 2");
  }
  {
    // Another accumulation setting.
    accel::Accelerator accelerator(
        accel::AcceleratorOptions().cpu(true).gradient_accumulation_steps(4));
    CheckpointedTwoLayers run(accelerator);
    refused(accelerator, *run.model,
            "was saved with gradient_accumulation_steps 1 and this run has 4");
  }
  {
    // A process's files missing.
    fs::remove(fs::path(folder) / "random_states_0.pt");
    accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
    CheckpointedTwoLayers run(accelerator);
    refused(accelerator, *run.model, "is missing process 0's files: random_states_0.pt");
  }
}

// Saved from inside accumulate(), on every micro-step, the checkpoint holds the optimizer's real
// parameter groups and, inside a window, the gradients accumulated so far; loaded into a fresh
// run it continues as the saving run does.
TEST(SaveState, SavesInsideAnAccumulationWindowHoldTheWindow) {
  TempDir dir;
  auto options = accel::AcceleratorOptions().cpu(true).gradient_accumulation_steps(3);
  for (int saved_at = 1; saved_at <= 4; ++saved_at) {
    SCOPED_TRACE("saved at micro-step " + std::to_string(saved_at));
    const auto folder = (dir / ("at_" + std::to_string(saved_at))).string();
    std::vector<torch::Tensor> straight;
    {
      accel::Accelerator accelerator(options);
      torch::manual_seed(3);
      CheckpointedTwoLayers run(accelerator);
      for (int k = 1; k <= 7; ++k) {
        auto scope = accelerator.accumulate(run.model);
        accelerator.backward(run.model->forward(torch::full({4, 2}, 0.1 * k)).pow(2).sum());
        run.optimizer.step();
        run.optimizer.zero_grad();
        if (k == saved_at) {
          accelerator.save_state(folder);
          const bool inside = saved_at % 3 != 0;
          EXPECT_EQ(fs::exists(fs::path(folder) / "window_gradients_0.safetensors"), inside);
          auto summary = nlohmann::json::parse(read_bytes(fs::path(folder) / "accel_state.json"));
          EXPECT_EQ(summary["micro_step"], saved_at);
          EXPECT_EQ(summary["window_gradients"], inside);
        }
      }
      for (const auto& p : run.model->parameters()) straight.push_back(p.detach().clone());
    }
    accel::Accelerator accelerator(options);
    torch::manual_seed(4);  // other weights: everything comes from the checkpoint
    CheckpointedTwoLayers run(accelerator);
    accelerator.load_state(folder);
    for (int k = saved_at + 1; k <= 7; ++k) {
      auto scope = accelerator.accumulate(run.model);
      accelerator.backward(run.model->forward(torch::full({4, 2}, 0.1 * k)).pow(2).sum());
      run.optimizer.step();
      run.optimizer.zero_grad();
    }
    const auto resumed = run.model->parameters();
    for (size_t i = 0; i < straight.size(); ++i) {
      EXPECT_TRUE(torch::equal(resumed[i], straight[i])) << "parameter " << i;
    }
  }
}

// A run killed twice in one epoch of a shuffled loader without a seed option: the first resume
// continues the order the epoch was drawn with, and so does the second, from the checkpoint the
// first resume saved. Every start but the first begins with another generator state (a fresh
// process), which load_state puts back.
// A folder written by the libaccel of before the training loop's state was split among its owners
// (fb57ca5, issue 73: fixtures/before_issue_73, format_fixture.h's run saved inside an
// accumulation window after micro-step 3 of 4) loads into today's, and the run it resumes ends
// as the run that was never interrupted, bit for bit: the weights, the optimizer's moments, the
// window's gradients, the scheduler, the loader's position and the generators all came back.
TEST(SaveState, AFolderWrittenBeforeTheTrainingLoopSplitLoads) {
  const auto folder =
      std::filesystem::path(__FILE__).parent_path() / "fixtures" / "before_issue_73";
  ASSERT_TRUE(std::filesystem::exists(folder / "accel_state.json")) << folder;
  const auto whole = format_fixture::run("", "");
  const auto resumed = format_fixture::run(folder.string(), "");
  EXPECT_EQ(whole.micro_steps_run, 4);
  EXPECT_EQ(resumed.micro_steps_run, 1);            // the loader resumed at the epoch's last batch
  EXPECT_FALSE(resumed.sync_gradients_after_load);  // saved inside the window
  EXPECT_EQ(resumed.step, whole.step);
  EXPECT_TRUE(torch::equal(resumed.weight, whole.weight)) << resumed.weight << whole.weight;
  EXPECT_TRUE(torch::equal(resumed.bias, whole.bias)) << resumed.bias << whole.bias;
}

TEST(SaveState, AShuffledLoaderResumedTwiceInOneEpochKeepsTheEpochsOrder) {
  using Random = torch::data::samplers::RandomSampler;
  constexpr int kEpochs = 2;
  TempDir dir;
  const auto options = accel::AcceleratorOptions().cpu(true);
  std::vector<int64_t> straight;
  {
    torch::manual_seed(11);
    accel::Accelerator accelerator(options);
    auto loader = accelerator.prepare_data_loader<Random>(accel_test::RangeDataset(40), 4);
    for (int epoch = 0; epoch < kEpochs; ++epoch) {
      for (auto& batch : *loader) straight.insert(straight.end(), batch.begin(), batch.end());
    }
  }
  std::vector<int64_t> killed;
  // Reads `batches` batches (all that are left when 0) after loading `from`, then saves to `to`.
  auto start = [&](uint64_t seed, const std::string& from, size_t batches, const std::string& to) {
    torch::manual_seed(seed);
    accel::Accelerator accelerator(options);
    auto loader = accelerator.prepare_data_loader<Random>(accel_test::RangeDataset(40), 4);
    if (!from.empty()) accelerator.load_state(from);
    size_t read = 0;
    for (auto epoch = loader->epoch(); epoch < kEpochs; ++epoch) {
      for (auto& batch : *loader) {
        killed.insert(killed.end(), batch.begin(), batch.end());
        if (++read == batches) return accelerator.save_state(to);
      }
    }
    return std::string();
  };
  const auto first = start(11, "", 3, (dir / "first").string());
  const auto second = start(12, first, 3, (dir / "second").string());
  start(13, second, 0, "");
  EXPECT_EQ(killed, straight);
}

}  // namespace
