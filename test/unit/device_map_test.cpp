// Sizes, budgets and device maps, checked against Accelerate's own expectations
// (tests/test_modeling_utils.py: a Linear(3,4) -> BatchNorm1d(4) -> Linear(4,5) model).

#include <accel/device_map.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

struct ModelForTestImpl : torch::nn::Module {
  ModelForTestImpl()
      : linear1(register_module("linear1", torch::nn::Linear(3, 4))),
        batchnorm(register_module("batchnorm", torch::nn::BatchNorm1d(4))),
        linear2(register_module("linear2", torch::nn::Linear(4, 5))) {}
  torch::nn::Linear linear1;
  torch::nn::BatchNorm1d batchnorm;
  torch::nn::Linear linear2;
};
TORCH_MODULE(ModelForTest);

/// Two blocks of two Linear(4, 4) each (80 bytes a Linear, 160 a block).
struct PairImpl : torch::nn::Module {
  PairImpl()
      : a(register_module("a", torch::nn::Linear(4, 4))),
        b(register_module("b", torch::nn::Linear(4, 4))) {}
  torch::nn::Linear a, b;
};
TORCH_MODULE(Pair);

struct TwoPairsImpl : torch::nn::Module {
  TwoPairsImpl()
      : first(register_module("first", Pair())), second(register_module("second", Pair())) {}
  Pair first, second;
};
TORCH_MODULE(TwoPairs);

TEST(DeviceMap, ModuleSizesMatchAccelerate) {
  ModelForTest model;
  const auto sizes = accel::compute_module_sizes(*model);
  EXPECT_EQ(sizes.at(""), 236);
  EXPECT_EQ(sizes.at("linear1"), 64);
  EXPECT_EQ(sizes.at("linear1.weight"), 48);
  EXPECT_EQ(sizes.at("linear1.bias"), 16);
  EXPECT_EQ(sizes.at("batchnorm"),
            72);  // weight, bias, running stats (4 floats each), an int64 count
  EXPECT_EQ(sizes.at("linear2"), 100);
}

TEST(DeviceMap, DtypeShrinksFloatingTensorsOnly) {
  ModelForTest model;
  const auto sizes = accel::compute_module_sizes(*model, torch::kFloat16);
  EXPECT_EQ(sizes.at("linear1"), 32);
  EXPECT_EQ(sizes.at("batchnorm"), 4 * 8 + 8);  // num_batches_tracked keeps its 8 bytes
  EXPECT_EQ(accel::compute_module_sizes(*model, torch::kFloat64).at(""), 236);  // never grows
}

TEST(DeviceMap, InferAutoDeviceMapMatchesAccelerate) {
  ModelForTest model;
  const auto map = accel::infer_auto_device_map(
      *model, accel::DeviceMapOptions().max_memory({{"cuda:0", 200}, {"cuda:1", 200}}));
  const accel::DeviceMap expected = {
      {"linear1", "cuda:0"}, {"batchnorm", "cuda:1"}, {"linear2", "cuda:1"}};
  EXPECT_EQ(map, expected);
}

TEST(DeviceMap, CpuKeepsRoomForTheLargestLayerAndTheRestGoesToDisk) {
  ModelForTest model;
  // cpu 200 - 100 reserved for linear2: linear1 fits (64), batchnorm does not (136).
  auto map =
      accel::infer_auto_device_map(*model, accel::DeviceMapOptions().max_memory({{"cpu", 200}}));
  EXPECT_EQ(map,
            (accel::DeviceMap{{"linear1", "cpu"}, {"batchnorm", "disk"}, {"linear2", "disk"}}));
  // The reserve is for layers still to come: with 250, linear2, the last, fits beside the others.
  map = accel::infer_auto_device_map(*model, accel::DeviceMapOptions().max_memory({{"cpu", 250}}));
  EXPECT_EQ(map, (accel::DeviceMap{{"", "cpu"}}));
  map = accel::infer_auto_device_map(*model, accel::DeviceMapOptions().max_memory({{"cpu", 50}}));
  EXPECT_EQ(map, (accel::DeviceMap{{"", "disk"}}));
}

TEST(DeviceMap, SplitsModulesUnlessTheirClassIsNoSplit) {
  TwoPairs model;
  // cuda:0 holds 250 - 80 (the largest layer) = 170: first fits, second does not.
  const accel::MaxMemory budget = {{"cuda:0", 250}, {"cuda:1", 1000}};
  auto map = accel::infer_auto_device_map(*model, accel::DeviceMapOptions().max_memory(budget));
  EXPECT_EQ(map, (accel::DeviceMap{{"first", "cuda:0"}, {"second", "cuda:1"}}));
  // With 200 - 80: first does not fit, so it is split; first.a fits, first.b does not.
  map = accel::infer_auto_device_map(
      *model, accel::DeviceMapOptions().max_memory({{"cuda:0", 200}, {"cuda:1", 1000}}));
  EXPECT_EQ(map,
            (accel::DeviceMap{{"first.a", "cuda:0"}, {"first.b", "cuda:1"}, {"second", "cuda:1"}}));
  // A Pair may not be split: cuda:0 must keep 160 for the largest layer, a whole Pair, and holds
  // none.
  map = accel::infer_auto_device_map(*model, accel::DeviceMapOptions()
                                                 .max_memory({{"cuda:0", 200}, {"cuda:1", 1000}})
                                                 .no_split_module_classes({"Pair"}));
  EXPECT_EQ(map, (accel::DeviceMap{{"", "cuda:1"}}));
}

TEST(DeviceMap, BalancedMemoryMatchesAccelerate) {
  ModelForTest model;
  const auto balanced = accel::get_balanced_memory(
      *model,
      accel::DeviceMapOptions().max_memory({{"cuda:0", 300}, {"cuda:1", 300}, {"cpu", 1000}}));
  EXPECT_EQ(balanced.at("cuda:0"), 215);  // 236 / 2 + 1.25 x the mean leaf module (78)
  EXPECT_EQ(balanced.at("cuda:1"), 300);  // the last device keeps its budget
  EXPECT_EQ(balanced.at("cpu"), 1000);
  const auto low_zero = accel::get_balanced_memory(
      *model,
      accel::DeviceMapOptions().max_memory({{"cuda:0", 300}, {"cuda:1", 300}, {"cpu", 1000}}),
      true);
  EXPECT_EQ(low_zero.at("cuda:0"), 0);  // cuda:1 alone holds the model
}

TEST(DeviceMap, CleanGroupsModulesOnOneDevice) {
  EXPECT_EQ(accel::clean_device_map({{"a", "cuda:0"}, {"b", "cuda:0"}, {"c", "cuda:0"}}),
            (accel::DeviceMap{{"", "cuda:0"}}));
  EXPECT_EQ(accel::clean_device_map({{"a.x", "cpu"}, {"a.y", "cpu"}, {"b", "disk"}}),
            (accel::DeviceMap{{"a", "cpu"}, {"b", "disk"}}));
  EXPECT_EQ(accel::clean_device_map({{"a.x.1", "cpu"}, {"a.x.2", "cpu"}, {"a.y", "disk"}}),
            (accel::DeviceMap{{"a.x", "cpu"}, {"a.y", "disk"}}));
}

TEST(DeviceMap, DeviceForUsesTheLongestCoveringEntry) {
  const accel::DeviceMap map = {{"blocks", "cpu"}, {"blocks.1", "disk"}, {"head", "cuda:0"}};
  EXPECT_EQ(accel::device_for(map, "blocks.0.weight"), "cpu");
  EXPECT_EQ(accel::device_for(map, "blocks.1.weight"), "disk");
  EXPECT_EQ(accel::device_for(map, "blocks.10.weight"), "cpu");  // "blocks.1" is no prefix of it
  try {
    accel::device_for(map, "norm.weight");
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no device for 'norm.weight'"), std::string::npos)
        << e.what();
  }
}

TEST(DeviceMap, BudgetsAreParsedAndBadDevicesRefused) {
  const auto budget = accel::parse_max_memory({{"cpu", "512MB"}, {"cuda:0", "1GiB"}});
  EXPECT_EQ(budget.at("cpu"), 512000000);
  EXPECT_EQ(budget.at("cuda:0"), int64_t{1} << 30);
  EXPECT_THROW(accel::parse_max_memory({{"gpu0", "1GB"}}), c10::Error);
  EXPECT_THROW(accel::get_max_memory({{"cuda:x", 1}}), c10::Error);
  const auto completed = accel::get_max_memory({{"cuda:0", 10}});
  EXPECT_GT(completed.at("cpu"), 0);  // 80% of what is available
}

}  // namespace
