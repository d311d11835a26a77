#include "sharded_state_dict.h"

#include "durable_file.h"
#include "module_tensors.h"
#include "sharded_parameter.h"

#include <accel/safetensors.h>

#include <c10/util/Exception.h>
#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <unordered_map>
#include <utility>

namespace accel {
namespace detail {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "accel-sharded-state-dict";

struct ModelUnit {
  std::string key;
  OptimizerShards::UnitLayout layout;
  std::vector<std::string> names;  // of its parameters, in the model
};

/// The units holding `module`'s parameters, in the order of the shards and of their units, with
/// the parameters' names (a tied parameter's first).
std::vector<ModelUnit> units_of(const torch::nn::Module& module,
                                const std::vector<std::shared_ptr<OptimizerShards>>& shards) {
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (const auto& entry : module_tensors(module)) {
    names.emplace(entry.second.unsafeGetTensorImpl(), entry.first);
  }
  std::vector<ModelUnit> units;
  for (const auto& optimizer_shards : shards) {
    if (!optimizer_shards->shards_parameters()) continue;
    for (auto& layout : optimizer_shards->unit_layouts()) {
      if (names.count(layout.params.front().unsafeGetTensorImpl()) == 0) continue;
      ModelUnit unit;
      unit.key = "unit." + std::to_string(units.size());
      for (const auto& p : layout.params) {
        auto found = names.find(p.unsafeGetTensorImpl());
        TORCH_CHECK(found != names.end(),
                    "accel: an optimizer unit mixes parameters of two models; SHARDED_STATE_DICT "
                    "needs one optimizer parameter group per model");
        unit.names.push_back(found->second);
      }
      unit.layout = std::move(layout);
      units.push_back(std::move(unit));
    }
  }
  return units;
}

nlohmann::json read_index(const std::string& path) {
  TORCH_CHECK(fs::is_regular_file(path), "accel: the checkpoint has no ", path,
              " (the index of a SHARDED_STATE_DICT model)");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "accel: ", path, " is not valid JSON: ", e.what());
  }
  TORCH_CHECK(index.is_object() && index.value("format", "") == kFormat, "accel: ", path,
              " is not a sharded state dict index (no \"format\": \"", kFormat, "\")");
  return index;
}

}  // namespace

std::string sharded_index_name(const std::string& weights_file) {
  return fs::path(weights_file).stem().string() + ".shards.json";
}

void save_sharded_model(const torch::nn::Module& module,
                        const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                        const std::string& file, const std::string& index_file,
                        const std::vector<std::string>& files, int64_t rank, int64_t processes) {
  const auto units = units_of(module, shards);
  NamedTensors tensors;
  for (const auto& unit : units) tensors.emplace_back(unit.key, unit.layout.shard.detach());
  nlohmann::json whole = nlohmann::json::array(), order = nlohmann::json::array();
  for (const auto& entry : module_tensors(module)) {
    order.push_back(entry.first);
    if (is_sharded(entry.second)) continue;
    whole.push_back(entry.first);
    if (rank == 0) tensors.push_back(entry);
  }
  save_safetensors(file, tensors, {{"format", kFormat}});
  if (rank != 0) return;
  nlohmann::json described = nlohmann::json::array();
  for (const auto& unit : units) {
    nlohmann::json parameters = nlohmann::json::array();
    for (size_t i = 0; i < unit.names.size(); ++i) {
      parameters.push_back({{"name", unit.names[i]},
                            {"shape", unit.layout.params[i].sizes().vec()},
                            {"offset", unit.layout.offsets[i]}});
    }
    described.push_back({{"key", unit.key},
                         {"shard_elements", unit.layout.shard.numel()},
                         {"dtype", safetensors_dtype_name(unit.layout.shard.scalar_type())},
                         {"parameters", parameters}});
  }
  const nlohmann::json index = {{"format", kFormat}, {"num_processes", processes},
                                {"files", files},    {"units", described},
                                {"whole", whole},    {"order", order}};
  write_file_durably(index_file, index.dump(2) + "\n");
}

void load_sharded_model(torch::nn::Module& module,
                        const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                        const std::string& file, const std::string& main_file,
                        const std::string& index_path, int64_t processes) {
  const auto index = read_index(index_path);
  const int64_t saved = index.value("num_processes", int64_t{0});
  TORCH_CHECK(saved == processes, "accel: ", index_path, " holds a model sharded over ", saved,
              " processes and this job has ", processes,
              "; turn it into whole weights with `accel merge-weights` and load those");
  const auto units = units_of(module, shards);
  TORCH_CHECK(index.contains("units") && index["units"].size() == units.size(),
              "accel: ", index_path, " describes ",
              index.contains("units") ? index["units"].size() : 0, " units and this model has ",
              units.size(),
              "; shard it with the same fsdp_transformer_layer_cls_to_wrap and parameter groups");
  const auto mine = load_safetensors(file);
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < units.size(); ++k) {
    const auto& unit = units[k];
    const auto& described = index["units"][k];
    std::vector<std::string> names;
    for (const auto& p : described.value("parameters", nlohmann::json::array())) {
      names.push_back(p.value("name", ""));
    }
    TORCH_CHECK(names == unit.names &&
                    described.value("shard_elements", int64_t{-1}) == unit.layout.shard.numel(),
                "accel: ", index_path, ": unit ", k, " holds other parameters than this model's (",
                names.empty() ? std::string("none") : names.front(), "...)");
    auto found = mine.find(unit.key);
    TORCH_CHECK(found != mine.end() && found->second.numel() == unit.layout.shard.numel(),
                "accel: ", file, " has no tensor '", unit.key, "' of ", unit.layout.shard.numel(),
                " elements");
    unit.layout.shard.detach().copy_(found->second);
  }
  // The whole tensors, from process 0's file.
  const auto main = file == main_file ? mine : load_safetensors(main_file);
  std::map<std::string, torch::Tensor> whole;
  for (const auto& name : index.value("whole", nlohmann::json::array())) {
    const auto key = name.get<std::string>();
    auto found = main.find(key);
    TORCH_CHECK(found != main.end(), "accel: ", main_file, " has no tensor '", key, "'");
    whole.emplace(key, found->second);
  }
  for (auto& entry : module_tensors(module)) {
    if (is_sharded(entry.second)) continue;
    auto found = whole.find(entry.first);
    TORCH_CHECK(found != whole.end(), "accel: ", main_file, " has no tensor '", entry.first,
                "', which the model has");
    TORCH_CHECK(found->second.sizes() == entry.second.sizes(), "accel: ", main_file, ": tensor '",
                entry.first, "' has shape ", found->second.sizes(), ", the model's has ",
                entry.second.sizes());
    entry.second.copy_(found->second);
  }
  // The shards changed: units gathered before are stale.
  for (const auto& optimizer_shards : shards) {
    if (optimizer_shards->shards_parameters()) optimizer_shards->gather_parameters();
  }
}

}  // namespace detail
}  // namespace accel
