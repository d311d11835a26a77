// The choices ResolvedOptions holds as enums, spelt as Accelerate spells them; and the spellings
// this release deprecates, which still compile and do what they did. This file is built with
// -Wno-deprecated-declarations for that reason (test/CMakeLists.txt).

#include <accel/accel.h>

#include <accel_common/contract.h>

#include <gtest/gtest.h>

#include <filesystem>

namespace {

TEST(OptionSpellings, EveryChoiceTheLauncherWritesParsesAndSpellsBackTheSame) {
  for (const auto& name : accel::contract::sharding_strategy_choices()) {
    const auto strategy = accel::parse_sharding_strategy(name);
    ASSERT_TRUE(strategy.has_value()) << name;
    EXPECT_EQ(accel::to_string(*strategy), name);
  }
  for (const auto& name : accel::contract::state_dict_type_choices()) {
    const auto type = accel::parse_state_dict_type(name);
    ASSERT_TRUE(type.has_value()) << name;
    EXPECT_EQ(accel::to_string(*type), name);
  }
  for (const auto& name : accel::contract::mixed_precision_choices()) {
    const auto precision = accel::parse_mixed_precision(name);
    ASSERT_TRUE(precision.has_value()) << name;
    EXPECT_EQ(accel::to_string(*precision), name);
  }
  EXPECT_FALSE(accel::parse_sharding_strategy("ZERO_3").has_value());
  EXPECT_FALSE(accel::parse_mixed_precision("fp32").has_value());
}

TEST(OptionSpellings, ResolvedOptionsHoldEnums) {
  const auto options = accel::resolve_options(accel::AcceleratorOptions()
                                                  .sharding_strategy("FULL_SHARD")
                                                  .fsdp_state_dict_type("SHARDED_STATE_DICT")
                                                  .mixed_precision("bf16"));
  EXPECT_EQ(options.sharding_strategy, accel::ShardingStrategy::FullShard);
  EXPECT_EQ(options.fsdp_state_dict_type, accel::StateDictType::ShardedStateDict);
  EXPECT_EQ(options.mixed_precision, accel::MixedPrecision::Bf16);
}

TEST(DeprecatedSpellings, ComparingTheEnumsWithTheirOldStringsStillWorks) {
  const auto options = accel::resolve_options(accel::AcceleratorOptions()
                                                  .sharding_strategy("SHARD_GRAD_OP")
                                                  .fsdp_state_dict_type("FULL_STATE_DICT")
                                                  .mixed_precision("no"));
  EXPECT_TRUE(options.sharding_strategy == "SHARD_GRAD_OP");
  EXPECT_TRUE(options.sharding_strategy != "FULL_SHARD");
  EXPECT_TRUE(options.fsdp_state_dict_type == "FULL_STATE_DICT");
  EXPECT_TRUE(options.fsdp_state_dict_type != "SHARDED_STATE_DICT");
  EXPECT_TRUE(options.mixed_precision == "no");
  EXPECT_TRUE(options.mixed_precision != "bf16");
}

TEST(DeprecatedSpellings, SaveModelAndPadWithPositionalArgumentsStillWork) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  torch::nn::Linear model(4, 3);
  const auto dir = std::filesystem::temp_directory_path() / "accel_deprecated_save_model";
  std::filesystem::remove_all(dir);
  accelerator.save_model(model, dir.string(), "10GB", /*safe_serialization=*/false);
  EXPECT_TRUE(std::filesystem::exists(dir / "model.pt"));
  accelerator.save_model(model, dir.string(), "40B");  // 60 bytes of weights: two shards
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  std::filesystem::remove_all(dir);

  const auto ragged = torch::arange(3);
  EXPECT_TRUE(torch::equal(accelerator.pad_across_processes(ragged, 0, -1, true), ragged));
}

}  // namespace
