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

/// A Linear whose weight is another's (PyTorch's `b.weight = a.weight`): LibTorch registers a
/// parameter name once, so the tie is made when the module is built.
struct TiedLinearImpl : torch::nn::Module {
  explicit TiedLinearImpl(const torch::Tensor& tied)
      : weight(register_parameter("weight", tied)),
        bias(register_parameter("bias", torch::zeros({tied.size(0)}))) {}
  torch::Tensor weight, bias;
};
TORCH_MODULE(TiedLinear);

/// ModelForTest whose linear2 may be tied to another's.
struct MaybeTiedImpl : torch::nn::Module {
  explicit MaybeTiedImpl(const torch::Tensor& tied = {}) {
    register_module("linear1", torch::nn::Linear(3, 4));
    register_module("batchnorm", torch::nn::BatchNorm1d(4));
    if (tied.defined()) {
      register_module("linear2", TiedLinear(tied));
    } else {
      register_module("linear2", torch::nn::Linear(4, 5));
    }
  }
};
TORCH_MODULE(MaybeTied);

/// Three ModelForTest layers, the third's linear2.weight being the first's (628 bytes).
struct ThreeLayersTiedImpl : torch::nn::Module {
  ThreeLayersTiedImpl() {
    auto layer1 = register_module("layer1", MaybeTied());
    register_module("layer2", MaybeTied());
    register_module("layer3", MaybeTied(layer1->named_parameters()["linear2.weight"]));
  }
};
TORCH_MODULE(ThreeLayersTied);

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
  // A budget is used as given, as in Accelerate: leaving "cpu" out means no CPU.
  EXPECT_EQ(accel::get_max_memory({{"cuda:0", 10}}), (accel::MaxMemory{{"cuda:0", 10}}));
  EXPECT_GT(accel::get_max_memory().at("cpu"), 0);  // an empty budget is what the machine has
  ModelForTest model;
  EXPECT_EQ(accel::infer_auto_device_map(
                *model, accel::DeviceMapOptions().max_memory({{"cuda:0", 150}, {"cuda:1", 100}})),
            (accel::DeviceMap{{"linear1", "cuda:1"}, {"batchnorm", "disk"}, {"linear2", "disk"}}));
}

// Expected maps are Accelerate 1.15's infer_auto_device_map on the same model and budgets.
TEST(DeviceMap, TiedWeightsStayOnOneDevice) {
  ThreeLayersTied model;
  EXPECT_EQ(accel::compute_module_sizes(*model).at(""), 628);  // the tied weight counts once
  auto map_for = [&](accel::MaxMemory budget) {
    return accel::infer_auto_device_map(*model, accel::DeviceMapOptions().max_memory(budget));
  };
  // layer1 takes layer3 along; when both do not fit, layer3 is split and its linear2 comes.
  EXPECT_EQ(map_for({{"cuda:0", 500}, {"cuda:1", 500}}),
            (accel::DeviceMap{{"layer1", "cuda:0"}, {"layer3", "cuda:0"}, {"layer2", "cuda:1"}}));
  EXPECT_EQ(map_for({{"cuda:0", 400}, {"cuda:1", 500}}),
            (accel::DeviceMap{{"layer1", "cuda:0"},
                              {"layer3.linear2", "cuda:0"},
                              {"layer3.linear1", "cuda:1"},
                              {"layer3.batchnorm", "cuda:1"},
                              {"layer2", "cuda:1"}}));
  // layer1 is split itself; its linear2 then takes layer3 along.
  EXPECT_EQ(map_for({{"cuda:0", 300}, {"cuda:1", 300}, {"cpu", 300}}),
            (accel::DeviceMap{{"layer1.linear1", "cuda:0"},
                              {"layer1.batchnorm", "cuda:0"},
                              {"layer1.linear2", "cuda:1"},
                              {"layer3", "cuda:1"},
                              {"layer2", "cpu"}}));
}

}  // namespace
