// The smaller parts of the Accelerator API reference on one process: set_seed,
// find_executable_batch_size with an injected out-of-memory error, profile()'s Chrome trace,
// save(), get_state_dict(), load_checkpoint_in_model, the save/load state pre-hooks, clear() and
// the process-control helpers. Their multi-process sides are in process_api_test.cpp.

#include <accel/accel.h>

#include "support/read_text.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using accel_test::read_text;
using accel_test::TempDir;
namespace fs = std::filesystem;

namespace {

struct TwoLayersImpl : torch::nn::Module {
  TwoLayersImpl() {
    first = register_module("first", torch::nn::Linear(4, 8));
    second = register_module("second", torch::nn::Linear(8, 2));
    register_buffer("steps", torch::zeros({1}, torch::kInt64));
  }
  torch::Tensor forward(const torch::Tensor& x) { return second(torch::relu(first(x))); }
  torch::nn::Linear first{nullptr}, second{nullptr};
};
TORCH_MODULE(TwoLayers);

bool same_tensors(const torch::nn::Module& a, const torch::nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (const auto& entry : pa) {
    if (!torch::equal(entry.value(), pb[entry.key()])) return false;
  }
  return true;
}

}  // namespace

TEST(SetSeed, SameSeedSameNumbersAndDeterministicMode) {
  accel::set_seed(7);
  const auto first = torch::randn({5});
  const int first_rand = std::rand();
  accel::set_seed(7);
  EXPECT_TRUE(torch::equal(first, torch::randn({5})));
  EXPECT_EQ(std::rand(), first_rand);
  // One process: device_specific adds process index 0.
  accel::set_seed(7, /*device_specific=*/true);
  EXPECT_TRUE(torch::equal(first, torch::randn({5})));

  accel::set_seed(7, false, /*deterministic=*/true);
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  EXPECT_STREQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), ":4096:8");
  at::globalContext().setDeterministicAlgorithms(false, false);
}

TEST(FindExecutableBatchSize, HalvesOnOutOfMemoryUntilItFits) {
  std::vector<int64_t> tried;
  const int64_t result = accel::find_executable_batch_size(
      [&](int64_t batch_size) {
        tried.push_back(batch_size);
        // What the CUDA caching allocator throws when a batch does not fit.
        TORCH_CHECK_WITH(OutOfMemoryError, batch_size <= 16,
                         "CUDA out of memory. Tried to "
                         "allocate 2.00 GiB");
        return batch_size * 10;
      },
      128);
  EXPECT_EQ(tried, (std::vector<int64_t>{128, 64, 32, 16}));
  EXPECT_EQ(result, 160);

  // The CPU allocator's words count too; a void function works.
  tried.clear();
  accel::find_executable_batch_size(
      [&](int64_t batch_size) {
        tried.push_back(batch_size);
        TORCH_CHECK(batch_size <= 2,
                    "DefaultCPUAllocator: can't allocate memory: you tried to "
                    "allocate 8000000000 bytes");
      },
      8);
  EXPECT_EQ(tried, (std::vector<int64_t>{8, 4, 2}));
}

TEST(FindExecutableBatchSize, OtherErrorsPassAndZeroIsAnError) {
  int calls = 0;
  EXPECT_THROW(accel::find_executable_batch_size(
                   [&](int64_t) {
                     ++calls;
                     TORCH_CHECK(false, "shape mismatch");
                   },
                   64),
               c10::Error);
  EXPECT_EQ(calls, 1) << "an error that is not out-of-memory is not retried";
  try {
    accel::find_executable_batch_size(
        [](int64_t) { TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory."); }, 4);
    FAIL() << "no batch size fits, and that went unreported";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("reached zero (started at 4)"), std::string::npos)
        << e.what();
  }
}

TEST(Profile, WritesAChromeTraceHoldingTheStepsOps) {
  TempDir dir;
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  TwoLayers model;
  accelerator.prepare(model);
  std::string path;
  {
    auto profile = accelerator.profile(
        accel::ProfileOptions().record_shapes(true).output_trace_dir((dir / "traces").string()));
    model->forward(torch::randn({16, 4})).sum().backward();
    path = profile.stop();
  }
  EXPECT_EQ(path, (dir / "traces" / "profile_0.json").string());
  const auto trace = nlohmann::json::parse(read_text(path));  // throws if it does not parse
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::set<std::string> names;
  for (const auto& event : trace["traceEvents"]) {
    if (event.contains("name") && event["name"].is_string()) names.insert(event["name"]);
  }
  EXPECT_TRUE(names.count("aten::addmm") || names.count("aten::linear"))
      << trace.dump().substr(0, 400);
  EXPECT_TRUE(names.count("aten::relu"));
  EXPECT_TRUE(names.count("autograd::engine::evaluate_function: AddmmBackward0"));
}

TEST(Save, WritesWithTorchSaveAndSafetensors) {
  TempDir dir;
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  const auto tensor = torch::arange(6).reshape({2, 3});
  accelerator.save(tensor, (dir / "sub" / "tensor.pt").string());
  torch::Tensor loaded;
  torch::load(loaded, (dir / "sub" / "tensor.pt").string());
  EXPECT_TRUE(torch::equal(loaded, tensor));

  accelerator.save(std::map<std::string, torch::Tensor>{{"w", tensor}},
                   (dir / "w.safetensors").string());
  EXPECT_TRUE(
      torch::equal(accel::load_safetensors((dir / "w.safetensors").string()).at("w"), tensor));
  // Nothing left beside them: each file was written to a temporary and renamed.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 2);
}

TEST(GetStateDict, IsTheModelsTensorsDetached) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  TwoLayers model;
  accelerator.prepare(model);
  const auto state = accelerator.get_state_dict(model);
  ASSERT_EQ(state.size(), 5u);
  EXPECT_EQ(state[0].first, "first.weight");
  EXPECT_EQ(state[4].first, "steps");
  EXPECT_FALSE(state[0].second.requires_grad());
  EXPECT_TRUE(torch::equal(state[0].second, model->first->weight));
}

TEST(LoadCheckpointInModel, LoadsWhereTheTensorsAreAndChecksFirst) {
  TempDir dir;
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  TwoLayers saved, fresh;
  accelerator.save_model(saved, dir.path().string());
  EXPECT_FALSE(same_tensors(*saved, *fresh));
  const auto result = accel::load_checkpoint_in_model(fresh, dir.path().string());
  EXPECT_TRUE(same_tensors(*saved, *fresh));
  EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());

  // A checkpoint lacking a tensor: refused when strict, leaving the model untouched.
  auto partial = accel::load_safetensors((dir / "model.safetensors").string());
  partial.erase("second.bias");
  partial["extra"] = torch::zeros({1});
  accelerator.save(partial, (dir / "partial" / "model.safetensors").string());
  TwoLayers other;
  const auto before = other->first->weight.clone();
  try {
    accel::load_checkpoint_in_model(other, (dir / "partial").string());
    FAIL() << "a missing tensor was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor 'second.bias'"), std::string::npos);
  }
  EXPECT_TRUE(torch::equal(before, other->first->weight));
  const auto loose = accel::load_checkpoint_in_model(other, (dir / "partial").string(),
                                                     accel::LoadCheckpointOptions().strict(false));
  EXPECT_EQ(loose.missing_keys, std::vector<std::string>{"second.bias"});
  EXPECT_EQ(loose.unexpected_keys, std::vector<std::string>{"extra"});
  EXPECT_TRUE(torch::equal(saved->first->weight, other->first->weight));
}

TEST(StatePreHooks, AHookSavesAModelItsOwnWayAndTheStateSkipsIt) {
  TempDir dir;
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  TwoLayers kept, custom;
  accelerator.prepare(kept);
  accelerator.prepare(custom);
  torch::nn::Module* custom_module = custom.ptr().get();
  std::vector<std::string> calls;
  auto save_hook = accelerator.register_save_state_pre_hook(
      [&](std::vector<torch::nn::Module*>& models, const std::string& folder) {
        calls.push_back("save");
        ASSERT_EQ(models.size(), 2u);
        torch::save(custom, (fs::path(folder) / "custom_model.pt").string());
        models.erase(std::remove(models.begin(), models.end(), custom_module), models.end());
      });
  auto load_hook = accelerator.register_load_state_pre_hook(
      [&](std::vector<torch::nn::Module*>& models, const std::string& folder) {
        calls.push_back("load");
        torch::load(custom, (fs::path(folder) / "custom_model.pt").string());
        models.erase(std::remove(models.begin(), models.end(), custom_module), models.end());
      });
  const auto saved_custom = custom->first->weight.clone();
  const auto saved_kept = kept->first->weight.clone();
  const auto folder = accelerator.save_state((dir / "ckpt").string());
  EXPECT_TRUE(fs::exists(fs::path(folder) / "custom_model.pt"));
  EXPECT_TRUE(fs::exists(fs::path(folder) / "model.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(folder) / "model_1.safetensors"));
  EXPECT_EQ(nlohmann::json::parse(read_text(fs::path(folder) / "accel_state.json"))["models"], 1);

  torch::NoGradGuard no_grad;
  custom->first->weight.zero_();
  kept->first->weight.zero_();
  accelerator.load_state(folder);
  EXPECT_TRUE(torch::equal(custom->first->weight, saved_custom));
  EXPECT_TRUE(torch::equal(kept->first->weight, saved_kept));
  EXPECT_EQ(calls, (std::vector<std::string>{"save", "load"}));

  // Removed hooks are not called; a second remove does nothing.
  save_hook.remove();
  save_hook.remove();
  load_hook.remove();
  accelerator.save_state((dir / "ckpt2").string());
  EXPECT_TRUE(fs::exists(dir / "ckpt2" / "model_1.safetensors"));
  EXPECT_EQ(calls.size(), 2u);
}

TEST(ProcessControl, OneProcessIsFirstLastAndLocalMain) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  EXPECT_TRUE(accelerator.is_last_process());
  EXPECT_EQ(accelerator.local_num_processes(), 1);
  std::vector<std::string> ran;
  accelerator.on_last_process([&] { ran.push_back("last"); });
  accelerator.on_local_main_process([&] { ran.push_back("local main"); });
  accelerator.on_process(0, [&] { ran.push_back("process 0"); });
  accelerator.on_local_process(0, [&] { ran.push_back("local 0"); });
  accelerator.local_main_process_first([&] { ran.push_back("first"); });
  EXPECT_EQ(ran, (std::vector<std::string>{"last", "local main", "process 0", "local 0", "first"}));
  try {
    accelerator.on_process(1, [] {});
    FAIL() << "process 1 of a one-process job was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("on_process(1): this job has processes 0 to 0"),
              std::string::npos)
        << e.what();
  }
}

TEST(Clear, ForgetsModelsAndTheStep) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  TwoLayers model;
  accelerator.prepare(model);
  { auto step = accelerator.accumulate(model); }
  EXPECT_EQ(accelerator.step(), 1);
  accelerator.clear();
  EXPECT_EQ(accelerator.step(), 0);
}

TEST(JoinUnevenInputs, OneProcessRunsAsIsAndMisuseIsNamed) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  TwoLayers model, unprepared;
  accelerator.prepare(model);
  {
    auto join = accelerator.join_uneven_inputs(model);
    model->forward(torch::randn({2, 4})).sum().backward();
    EXPECT_THROW({ auto nested = accelerator.join_uneven_inputs(false, model); },
                 c10::Error);  // no nesting
  }
  try {
    auto join = accelerator.join_uneven_inputs(false, unprepared);
    FAIL() << "an unprepared model was joined";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a model that was not prepared"), std::string::npos);
  }
}

TEST(ResumeIfPossible, LoadsTheNewestCheckpointOnlyWhenResumingIsOn) {
  TempDir dir;
  auto project = accel::ProjectConfiguration()
                     .project_dir(dir.path().string())
                     .automatic_checkpoint_naming(true);
  auto options = accel::AcceleratorOptions().cpu(true).project_config(project);
  TwoLayers model;
  torch::Tensor saved_weight;
  {
    accel::Accelerator accelerator(accel::AcceleratorOptions(options).resume(true));
    accelerator.prepare(model);
    EXPECT_FALSE(accelerator.resume_if_possible()) << "no checkpoint yet: a first start";
    EXPECT_FALSE(accelerator.resumed());
    for (int i = 0; i < 3; ++i) {
      auto step = accelerator.accumulate(model);
    }
    accelerator.save_state();  // checkpoint_0
    {
      torch::NoGradGuard no_grad;
      model->first->weight.add_(1);
    }
    accelerator.save_state();  // checkpoint_1, the newest
    saved_weight = model->first->weight.clone();
  }
  {
    TwoLayers restarted;
    accel::Accelerator accelerator(accel::AcceleratorOptions(options).resume(true));
    accelerator.prepare(restarted);
    EXPECT_TRUE(accelerator.resume_if_possible());
    EXPECT_TRUE(accelerator.resumed());
    EXPECT_TRUE(torch::equal(restarted->first->weight, saved_weight));
    EXPECT_EQ(accelerator.step(), 3);
    EXPECT_EQ(accelerator.project_configuration().iteration(), 2) << "the next save is new";
  }
  {
    // Resuming off (the default, and a first start under the launcher): nothing is loaded.
    TwoLayers fresh;
    const auto before = fresh->first->weight.clone();
    accel::Accelerator accelerator(options);
    accelerator.prepare(fresh);
    EXPECT_FALSE(accelerator.resume_if_possible());
    EXPECT_TRUE(torch::equal(fresh->first->weight, before));
  }
  {
    ::setenv("ACCEL_RESUME", "sometimes", 1);
    EXPECT_THROW(accel::Accelerator{options}, c10::Error);
    ::setenv("ACCEL_RESUME", "auto", 1);
    accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
    ::unsetenv("ACCEL_RESUME");
    try {
      accelerator.resume_if_possible();
      FAIL() << "resuming without automatic_checkpoint_naming was accepted";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("automatic_checkpoint_naming"), std::string::npos);
    }
  }
}

// gather, convert_to_fp32 and a loader's device placement walk containers one way
// (detail::apply_to_tensors): nested vectors, pairs, tuples and maps of tensors, other values kept.
TEST(ApplyToTensors, WalksNestedContainersAndKeepsOtherValues) {
  using Nested = std::tuple<std::vector<torch::Tensor>,
                            std::map<std::string, std::pair<torch::Tensor, int>>, std::string>;
  const Nested value{
      {torch::ones({2}), torch::zeros({1})}, {{"a", {torch::full({3}, 2.0), 7}}}, "label"};
  int calls = 0;
  const auto doubled = accel::detail::apply_to_tensors(value, [&](const torch::Tensor& t) {
    ++calls;
    return t * 2;
  });
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(torch::equal(std::get<0>(doubled)[0], torch::full({2}, 2.0)));
  EXPECT_TRUE(torch::equal(std::get<1>(doubled).at("a").first, torch::full({3}, 4.0)));
  EXPECT_EQ(std::get<1>(doubled).at("a").second, 7);
  EXPECT_EQ(std::get<2>(doubled), "label");
  EXPECT_TRUE(torch::equal(std::get<0>(value)[0], torch::ones({2})));  // the input is unchanged
  static_assert(accel::detail::holds_only_tensors<
                std::map<int, std::vector<std::pair<torch::Tensor, torch::Tensor>>>>::value);
  static_assert(!accel::detail::holds_only_tensors<std::pair<torch::Tensor, int>>::value);
}

TEST(Gather, ContainersOfTensorsKeepTheirShape) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  const std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> metrics{
      {"loss", {torch::tensor(1.5), torch::ones({2, 3})}}};
  const auto gathered = accelerator.gather(metrics);
  ASSERT_EQ(gathered.count("loss"), 1u);
  EXPECT_TRUE(torch::equal(gathered.at("loss").first, torch::tensor(1.5)));
  EXPECT_TRUE(torch::equal(gathered.at("loss").second, torch::ones({2, 3})));
  const auto batch = accel::detail::to_device(
      torch::data::Example<>(torch::ones({1}), torch::zeros({1})), torch::Device(torch::kCPU));
  EXPECT_TRUE(torch::equal(batch.data, torch::ones({1})));
}
