// init_empty_weights and load_checkpoint_and_dispatch: empty construction and its cost, placement
// by device map, offloaded weights read only while an operator uses them, results equal to the
// fully loaded model's, and errors for checkpoints that do not fit the model.

#include <accel/accel.h>

#include <gtest/gtest.h>

#include "../../../examples/gpt/gpt.h"
#include "support/temp_dir.h"

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

namespace {

namespace fs = std::filesystem;
using accel_test::TempDir;

int64_t status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

template <typename F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << fragment;
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// ---- init_empty_weights -------------------------------------------------------------------------

TEST(EmptyWeights, ParametersAreMetaAndBuffersKeepTheirValues) {
  auto model = accel::init_empty_weights([] {
    return torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                                 torch::nn::Linear(4, 5));
  });
  for (const auto& p : model->named_parameters()) {
    EXPECT_TRUE(p.value().is_meta()) << p.key();
    EXPECT_TRUE(p.value().requires_grad()) << p.key();
    EXPECT_TRUE(accel::is_empty_weight(p.value()));
  }
  auto* norm = model[1]->as<torch::nn::BatchNorm1dImpl>();
  ASSERT_TRUE(norm->running_var.is_cpu());
  EXPECT_TRUE(torch::equal(norm->running_var, torch::ones({4})));
  EXPECT_TRUE(torch::equal(norm->running_mean, torch::zeros({4})));
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 0);
  // The module's member handles see the same meta tensors as its registered entries.
  EXPECT_TRUE(model[0]->as<torch::nn::LinearImpl>()->weight.is_meta());
  EXPECT_EQ(model[0]->as<torch::nn::LinearImpl>()->weight.sizes(), (std::vector<int64_t>{4, 3}));

  gpt::Config config;
  auto decoder = accel::init_empty_weights([&] { return gpt::Gpt(config); });
  auto* attention = decoder->blocks[0]->as<gpt::BlockImpl>()->attention.get();
  EXPECT_TRUE(attention->q->weight.is_meta());
  EXPECT_TRUE(torch::equal(attention->mask, torch::ones({config.context, config.context}).tril()));
}

TEST(EmptyWeights, IncludeBuffersEmptiesBuffersToo) {
  auto model = accel::init_empty_weights([] { return torch::nn::BatchNorm1d(4); },
                                         accel::EmptyWeightsOptions().include_buffers(true));
  EXPECT_TRUE(model->weight.is_meta());
  EXPECT_TRUE(model->running_var.is_meta());
  EXPECT_TRUE(model->num_batches_tracked.is_meta());
}

struct LiteralImpl : torch::nn::Module {
  LiteralImpl()
      : scale(register_parameter("scale", torch::tensor({1.5, 2.5}))),
        offsets(register_buffer("offsets", torch::tensor({1.0, 2.0, 3.0}))) {}
  torch::Tensor scale, offsets;
};

TEST(EmptyWeights, WorksForSharedPtrsAndLiteralTensors) {
  auto model = accel::init_empty_weights([] { return std::make_shared<LiteralImpl>(); });
  EXPECT_TRUE(model->scale.is_meta());
  EXPECT_TRUE(torch::equal(model->offsets, torch::tensor({1.0, 2.0, 3.0})));
  // Nothing lingers: modules built afterwards are real.
  torch::nn::Linear after(2, 2);
  EXPECT_TRUE(after->weight.is_cpu());
  EXPECT_TRUE(torch::isfinite(after->weight).all().item<bool>());
}

TEST(EmptyWeights, SevenBillionParametersCostNoMemory) {
  const int64_t before_kib = status_kib("VmRSS");
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";  // resets the peak (VmHWM) to the current resident size
  }
  const auto start = std::chrono::steady_clock::now();
  auto model = accel::init_empty_weights([] {
    torch::nn::ModuleList layers;
    for (int i = 0; i < 128; ++i) layers->push_back(torch::nn::Linear(8192, 6656));
    return layers;
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t peak_kib = status_kib("VmHWM");
  int64_t parameters = 0;
  for (const auto& p : model->parameters()) {
    ASSERT_TRUE(p.is_meta());
    parameters += p.numel();
  }
  EXPECT_EQ(parameters, int64_t{128} * (8192 * 6656 + 6656));
  std::cout << "built " << parameters << " parameters in " << seconds << " s, peak resident growth "
            << (peak_kib - before_kib) / 1024 << " MB\n";
  EXPECT_LT(peak_kib - before_kib, 200 * 1024);
}

// ---- load_checkpoint_and_dispatch ---------------------------------------------------------------

class Dispatch : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.vocab = 64;
    config_.context = 16;
    config_.width = 32;
    config_.layers = 4;
    torch::manual_seed(0);
    reference_ = gpt::Gpt(config_);
    total_ = accel::compute_module_sizes(*reference_)[""];
    accel::Accelerator accelerator;
    accelerator.save_model(
        reference_, dir_.path().string(),
        accel::SaveModelOptions().max_shard_size(std::to_string(total_ / 3) + "B"));
    ids_ = torch::randint(config_.vocab, {2, config_.context}, torch::kLong);
    torch::NoGradGuard no_grad;
    expected_ = reference_->forward(ids_);
  }

  gpt::Gpt empty_model() const {
    return accel::init_empty_weights([&] { return gpt::Gpt(config_); });
  }

  double difference(gpt::Gpt& model) const {
    torch::NoGradGuard no_grad;
    return (model->forward(ids_) - expected_).abs().max().item<double>();
  }

  gpt::Config config_;
  TempDir dir_{"accel_dispatch"};
  gpt::Gpt reference_{nullptr};
  int64_t total_ = 0;
  torch::Tensor ids_, expected_;
};

TEST_F(Dispatch, ShardedCheckpointIsShardedAndIndexed) {
  EXPECT_TRUE(fs::exists(dir_ / "model.safetensors.index.json"));
  // A third of the model per shard, filled greedily in Accelerate's order (a shard closes before
  // the tensor that would overflow it): exactly 4 shards for this model.
  std::set<std::string> shards;
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    if (entry.path().extension() == ".safetensors") shards.insert(entry.path().filename().string());
  }
  EXPECT_EQ(shards, (std::set<std::string>{
                        "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                        "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"}));
}

TEST_F(Dispatch, EverythingOnTheCpuEqualsTheReference) {
  auto model = empty_model();
  const auto placed = accel::load_checkpoint_and_dispatch(model, dir_.path().string());
  EXPECT_EQ(placed.device_map, (accel::DeviceMap{{"", "cpu"}}));
  EXPECT_TRUE(placed.execution_device.is_cpu());
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.is_meta());
  EXPECT_EQ(difference(model), 0.0);
}

TEST_F(Dispatch, CpuBudgetLeavesTheRestOnDiskWithEqualResults) {
  auto model = empty_model();
  const auto placed =
      accel::load_checkpoint_and_dispatch(model, dir_.path().string(),
                                          accel::DispatchOptions()
                                              .max_memory({{"cpu", total_ * 3 / 10}})
                                              .no_split_module_classes({"Block"}));
  int offloaded = 0, resident = 0;
  for (const auto& p : model->named_parameters()) {
    (accel::is_offloaded(p.value()) ? offloaded : resident)++;
    EXPECT_EQ(accel::is_offloaded(p.value()),
              accel::device_for(placed.device_map, p.key()) == "disk")
        << p.key();
  }
  EXPECT_GT(offloaded, 0);
  EXPECT_GT(resident, 0);
  EXPECT_GT(placed.bytes_per_device.at("disk"), 0);
  EXPECT_LE(placed.bytes_per_device.at("cpu"), total_ * 3 / 10);

  accel::reset_offload_statistics();
  EXPECT_EQ(accel::offload_statistics().live_bytes, 0);
  EXPECT_LE(difference(model), 1e-6);
  const auto stats = accel::offload_statistics();
  EXPECT_GE(stats.materialisations, offloaded);
  EXPECT_GT(stats.bytes_read, 0);
  EXPECT_GT(stats.peak_live_bytes, 0);
  EXPECT_EQ(stats.live_bytes, 0);  // every copy was released after its operator
  // The largest weight alive at once is a small part of what was read.
  EXPECT_LT(stats.peak_live_bytes, stats.bytes_read / 2);
  for (const auto& p : model->parameters()) {
    if (accel::is_offloaded(p)) {
      EXPECT_TRUE(p.is_meta());
    }
  }
  EXPECT_LE(difference(model), 1e-6);  // and again: nothing was consumed
}

TEST_F(Dispatch, OffloadedWeightsAreRealOnlyWhileUsed) {
  auto model = empty_model();
  accel::load_checkpoint_and_dispatch(model, dir_.path().string(),
                                      accel::DispatchOptions().device_map({{"", "disk"}}));
  const torch::Tensor weight = model->head->weight;
  ASSERT_TRUE(accel::is_offloaded(weight));
  accel::reset_offload_statistics();
  {
    // An operator on it sees the real values on the execution device; its result keeps the copy
    // alive.
    torch::Tensor view = weight.view({-1});
    EXPECT_TRUE(view.is_cpu());
    EXPECT_TRUE(torch::equal(view, reference_->head->weight.view({-1})));
    EXPECT_EQ(accel::offload_statistics().live_bytes, weight.numel() * 4);
  }
  EXPECT_EQ(accel::offload_statistics().live_bytes, 0);
  EXPECT_TRUE(accel::is_offloaded(model->head->weight));
  EXPECT_LE(difference(model), 1e-6);
}

TEST_F(Dispatch, ExplicitMapsAndZeroCopy) {
  auto model = empty_model();
  accel::load_checkpoint_and_dispatch(
      model, dir_.path().string(),
      accel::DispatchOptions().device_map({{"", "cpu"}, {"blocks.1", "disk"}}).zero_copy(true));
  EXPECT_TRUE(accel::is_offloaded(model->blocks[1]->as<gpt::BlockImpl>()->up->weight));
  EXPECT_FALSE(accel::is_offloaded(model->blocks[0]->as<gpt::BlockImpl>()->up->weight));
  EXPECT_FALSE(model->head->weight.is_meta());
  EXPECT_EQ(difference(model), 0.0);
}

TEST_F(Dispatch, DtypeChangeOnDiskGoesThroughTheOffloadFolder) {
  auto on_cpu = empty_model();
  accel::load_checkpoint_and_dispatch(on_cpu, dir_.path().string(),
                                      accel::DispatchOptions().dtype(torch::kBFloat16));
  EXPECT_EQ(on_cpu->head->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(on_cpu->blocks[0]->as<gpt::BlockImpl>()->attention->mask.scalar_type(),
            torch::kBFloat16);

  auto on_disk = empty_model();
  expect_error(
      [&] {
        accel::load_checkpoint_and_dispatch(
            on_disk, dir_.path().string(),
            accel::DispatchOptions().device_map({{"", "disk"}}).dtype(torch::kBFloat16));
      },
      "offload_folder");
  EXPECT_TRUE(on_disk->head->weight.is_meta());  // refused before anything was placed
  TempDir folder("accel_offload");
  accel::load_checkpoint_and_dispatch(on_disk, dir_.path().string(),
                                      accel::DispatchOptions()
                                          .device_map({{"", "disk"}})
                                          .dtype(torch::kBFloat16)
                                          .offload_folder(folder.path().string()));
  EXPECT_TRUE(fs::exists(folder / "head.weight.safetensors"));
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(on_disk->forward(ids_), on_cpu->forward(ids_)));
}

TEST_F(Dispatch, CheckpointsThatDoNotFitTheModelAreRefused) {
  auto wider = accel::init_empty_weights([&] {
    auto c = config_;
    c.width = 48;
    return gpt::Gpt(c);
  });
  expect_error([&] { accel::load_checkpoint_and_dispatch(wider, dir_.path().string()); },
               "has shape");
  EXPECT_TRUE(wider->head->weight.is_meta());

  auto deeper = accel::init_empty_weights([&] {
    auto c = config_;
    c.layers = 5;
    return gpt::Gpt(c);
  });
  expect_error([&] { accel::load_checkpoint_and_dispatch(deeper, dir_.path().string()); },
               "has no tensor 'blocks.4.");

  auto shallower = accel::init_empty_weights([&] {
    auto c = config_;
    c.layers = 3;
    return gpt::Gpt(c);
  });
  expect_error([&] { accel::load_checkpoint_and_dispatch(shallower, dir_.path().string()); },
               "which the model does not have");

  auto model = empty_model();
  expect_error(
      [&] {
        accel::load_checkpoint_and_dispatch(
            model, dir_.path().string(), accel::DispatchOptions().device_map({{"blocks", "cpu"}}));
      },
      "no device for 'tokens.weight'");
  expect_error(
      [&] {
        accel::load_checkpoint_and_dispatch(model, dir_.path().string(),
                                            accel::DispatchOptions().device_map("fastest"));
      },
      "not one of auto");
  expect_error(
      [&] {
        accel::load_checkpoint_and_dispatch(model, dir_.path().string(),
                                            accel::DispatchOptions().device_map({{"", "gpu"}}));
      },
      "'gpu' is not recognised");
  TempDir empty("accel_empty_ckpt");
  expect_error([&] { accel::load_checkpoint_and_dispatch(model, empty.path().string()); },
               "holds neither");
  EXPECT_TRUE(model->head->weight.is_meta());
}

TEST_F(Dispatch, MalformedIndexFilesAreNamed) {
  auto model = empty_model();
  const std::string index = (dir_ / "model.safetensors.index.json").string();
  auto write = [&](const std::string& text) { std::ofstream(index) << text; };
  write("{not json");
  expect_error([&] { accel::load_checkpoint_and_dispatch(model, dir_.path().string()); }, index);
  write(R"({"weight_map": {"head.weight": "../elsewhere.safetensors"}})");
  expect_error([&] { accel::load_checkpoint_and_dispatch(model, dir_.path().string()); },
               "outside the index's folder");
  write(R"({"weight_map": {"head.weight": "missing.safetensors"}})");
  expect_error([&] { accel::load_checkpoint_and_dispatch(model, dir_.path().string()); },
               "missing.safetensors");
  write(R"({"metadata": {}})");
  expect_error([&] { accel::load_checkpoint_and_dispatch(model, dir_.path().string()); },
               "weight_map");
  // A shard with a corrupt header is named.
  fs::remove(index);
  std::ofstream(dir_ / "model.safetensors", std::ios::binary)
      << std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8);
  expect_error([&] { accel::load_checkpoint_and_dispatch(model, dir_.path().string()); },
               (dir_ / "model.safetensors").string());
  EXPECT_TRUE(model->head->weight.is_meta());
}

}  // namespace
