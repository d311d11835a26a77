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
  for (const auto& name : accel::contract::ddp_comm_hook_choices()) {
    const auto hook = accel::parse_ddp_comm_hook(name);
    ASSERT_TRUE(hook.has_value()) << name;
    EXPECT_EQ(accel::to_string(*hook), name);
  }
  EXPECT_FALSE(accel::parse_sharding_strategy("ZERO_3").has_value());
  EXPECT_FALSE(accel::parse_ddp_comm_hook("power_sgd").has_value());
  EXPECT_FALSE(accel::parse_mixed_precision("fp32").has_value());
}

TEST(OptionSpellings, ResolvedOptionsHoldEnums) {
  const auto options = accel::resolve_options(accel::AcceleratorOptions()
                                                  .sharding_strategy("FULL_SHARD")
                                                  .fsdp_state_dict_type("SHARDED_STATE_DICT")
                                                  .mixed_precision("bf16"));
  EXPECT_EQ(options.sharding_strategy, accel::ShardingStrategy::FullShard);
  EXPECT_EQ(options.fsdp.state_dict_type, accel::StateDictType::ShardedStateDict);
  EXPECT_EQ(options.mixed_precision, accel::MixedPrecision::Bf16);
  EXPECT_EQ(options.ddp.comm_hook(), accel::DdpCommHook::No);  // the default, resolved
  EXPECT_EQ(accel::DistributedDataParallelOptions().comm_hook("bf16").comm_hook(),
            accel::DdpCommHook::Bf16);
}

TEST(OptionSpellings, EveryEnumValueHasItsNameAndEveryNameParses) {
  using accel::DdpCommHook;
  for (const auto hook : {DdpCommHook::No, DdpCommHook::Fp16, DdpCommHook::Bf16}) {
    EXPECT_TRUE(accel::contract::is_one_of(accel::to_string(hook),
                                           accel::contract::ddp_comm_hook_choices()));
  }
  using accel::DeviceMapStrategy;
  for (const auto strategy : {DeviceMapStrategy::Auto, DeviceMapStrategy::Balanced,
                              DeviceMapStrategy::BalancedLow0, DeviceMapStrategy::Sequential}) {
    EXPECT_EQ(accel::parse_device_map_strategy(accel::to_string(strategy)), strategy);
    EXPECT_EQ(accel::DispatchOptions().device_map(accel::to_string(strategy)).strategy(), strategy);
  }
  EXPECT_FALSE(accel::parse_device_map_strategy("fastest").has_value());
  using accel::Fp8Recipe;
  for (const auto recipe : {Fp8Recipe::Tensorwise, Fp8Recipe::Rowwise}) {
    EXPECT_EQ(accel::parse_fp8_recipe(accel::to_string(recipe)), recipe);
    EXPECT_EQ(accel::Fp8Options().recipe(accel::to_string(recipe)).recipe(), recipe);
  }
  EXPECT_FALSE(accel::parse_fp8_recipe("delayed").has_value());
  EXPECT_FALSE(accel::parse_device_map_strategy("Auto").has_value());
  EXPECT_EQ(accel::DispatchOptions().strategy(), DeviceMapStrategy::Auto);
}

TEST(DeprecatedSpellings, ComparingTheEnumsWithTheirOldStringsStillWorks) {
  const auto options = accel::resolve_options(accel::AcceleratorOptions()
                                                  .sharding_strategy("SHARD_GRAD_OP")
                                                  .fsdp_state_dict_type("FULL_STATE_DICT")
                                                  .mixed_precision("no"));
  EXPECT_TRUE(options.sharding_strategy == "SHARD_GRAD_OP");
  EXPECT_TRUE(options.sharding_strategy != "FULL_SHARD");
  EXPECT_TRUE(options.fsdp.state_dict_type == "FULL_STATE_DICT");
  EXPECT_TRUE(options.fsdp.state_dict_type != "SHARDED_STATE_DICT");
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
