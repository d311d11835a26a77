// FULL_SHARD's auto-wrap policies: which parameters make a unit.

#include "sharding/wrap_policy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

namespace {

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    attention = register_module("attention", torch::nn::Linear(8, 8));  // 72 parameters
    mlp = register_module("mlp", torch::nn::Linear(8, 4));              // 36
  }
  torch::nn::Linear attention{nullptr}, mlp{nullptr};
};
TORCH_MODULE(Block);

/// An output layer whose weight is another module's (tied), and a bias of its own (5).
struct TiedHeadImpl : torch::nn::Module {
  explicit TiedHeadImpl(const torch::Tensor& tied) {
    weight = register_parameter("weight", tied);
    bias = register_parameter("bias", torch::zeros({5}));
  }
  torch::Tensor weight, bias;
};
TORCH_MODULE(TiedHead);

/// An embedding (40), two blocks in a ModuleList, and a head tied to the embedding's weight.
struct ModelImpl : torch::nn::Module {
  ModelImpl() {
    embedding = register_module("embedding", torch::nn::Embedding(5, 8));
    blocks = register_module("blocks", torch::nn::ModuleList(Block(), Block()));
    head = register_module("head", TiedHead(embedding->weight));
  }
  torch::nn::Embedding embedding{nullptr};
  torch::nn::ModuleList blocks;
  TiedHead head{nullptr};
};
TORCH_MODULE(Model);

int64_t unit_of(const std::unordered_map<const c10::TensorImpl*, int64_t>& units,
                const torch::Tensor& p) {
  return units.at(p.unsafeGetTensorImpl());
}

TEST(WrapPolicy, BySizeWrapsFromTheLeavesUpAndLeavesTheRestToTheRoot) {
  Model model;
  const auto& block0 = *model->blocks[0]->as<BlockImpl>();
  const auto& block1 = *model->blocks[1]->as<BlockImpl>();
  // 50: each attention layer (72) is a unit; each mlp (36) is not, and neither is what its block
  // has left (36); the ModuleList never is; the root keeps the embedding (tied to the head's
  // weight), the head's bias and both mlps.
  auto units = accel::sharding::units_by_size(*model, 50, 1);
  // Every parameter has a unit; parameters() lists the tied one twice.
  EXPECT_EQ(model->parameters().size(), 11u);
  EXPECT_EQ(units.size(), 10u);
  EXPECT_EQ(unit_of(units, block0.attention->weight), unit_of(units, block0.attention->bias));
  EXPECT_GE(unit_of(units, block0.attention->weight), 1);
  EXPECT_GE(unit_of(units, block1.attention->weight), 1);
  EXPECT_NE(unit_of(units, block0.attention->weight), unit_of(units, block1.attention->weight));
  for (const auto& p :
       {block0.mlp->weight, block1.mlp->bias, model->embedding->weight, model->head->bias}) {
    EXPECT_EQ(unit_of(units, p), 0);
  }
  // 100: a block's 108 parameters make its unit, the ModuleList's 216 do not.
  units = accel::sharding::units_by_size(*model, 100, 3);
  EXPECT_EQ(unit_of(units, block0.attention->weight), 3);
  EXPECT_EQ(unit_of(units, block0.mlp->bias), 3);
  EXPECT_EQ(unit_of(units, block1.mlp->weight), 4);
  EXPECT_EQ(unit_of(units, model->embedding->weight), 0);
  // 40: the embedding is a unit; the head is left its bias (5), as the tied weight is taken.
  units = accel::sharding::units_by_size(*model, 40, 1);
  EXPECT_GE(unit_of(units, model->embedding->weight), 1);
  EXPECT_EQ(unit_of(units, model->head->bias), 0);
  // Larger than the model: one unit, the root's.
  units = accel::sharding::units_by_size(*model, 1 << 20, 1);
  std::set<int64_t> numbers;
  for (const auto& entry : units) numbers.insert(entry.second);
  EXPECT_EQ(numbers, std::set<int64_t>{0});
}

TEST(WrapPolicy, ByClassTakesTheInnermostAndNamesTheClassesItHas) {
  Model model;
  const auto& block0 = *model->blocks[0]->as<BlockImpl>();
  auto units = accel::sharding::units_by_class(*model, {"Block"}, 1);
  EXPECT_EQ(unit_of(units, block0.attention->weight), unit_of(units, block0.mlp->bias));
  EXPECT_GE(unit_of(units, block0.attention->weight), 1);
  EXPECT_EQ(unit_of(units, model->embedding->weight), 0);
  // A Linear inside a Block is its own unit when both are named.
  units = accel::sharding::units_by_class(*model, {"Block", "torch::nn::Linear"}, 1);
  EXPECT_NE(unit_of(units, block0.attention->weight), unit_of(units, block0.mlp->weight));
  try {
    accel::sharding::units_by_class(*model, {"Layer"}, 1);
    ADD_FAILURE() << "a class the model does not have was accepted";
  } catch (const c10::Error& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("names 'Layer', which is the class of no submodule"), std::string::npos)
        << what;
    EXPECT_NE(what.find("BlockImpl"), std::string::npos) << what;
  }
}

TEST(WrapPolicy, ClassNamesMatchWithOrWithoutNamespaceAndImpl) {
  EXPECT_TRUE(accel::sharding::class_name_matches("torch::nn::LinearImpl", "Linear"));
  EXPECT_TRUE(accel::sharding::class_name_matches("torch::nn::LinearImpl", "torch::nn::Linear"));
  EXPECT_TRUE(accel::sharding::class_name_matches("BlockImpl", "BlockImpl"));
  EXPECT_FALSE(accel::sharding::class_name_matches("torch::nn::LinearImpl", "Bilinear"));
}

}  // namespace
