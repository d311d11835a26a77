#include "sharded_state_dict.h"

#include "accel_common/sharded_checkpoint.h"

#include "module_tensors.h"
#include "sharded_parameter.h"
#include "util/durable_file.h"

#include <accel/safetensors.h>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <unordered_map>
#include <utility>

namespace accel {
namespace sharding {
namespace {

namespace fs = std::filesystem;

using sharded_checkpoint::kFormat;
namespace index_key = sharded_checkpoint::key;

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
    index = nlohmann::json::parse(util::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "accel: ", path, " is not valid JSON: ", e.what());
  }
  TORCH_CHECK(index.is_object() && index.value(index_key::kFormat, "") == kFormat, "accel: ", path,
              " is not a sharded state dict index (no \"format\": \"", kFormat, "\")");
  return index;
}

}  // namespace

std::string sharded_index_name(const std::string& weights_file) {
  return fs::path(weights_file).stem().string() + sharded_checkpoint::kIndexSuffix;
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
      parameters.push_back({{index_key::kName, unit.names[i]},
                            {index_key::kShape, unit.layout.params[i].sizes().vec()},
                            {index_key::kOffset, unit.layout.offsets[i]}});
    }
    described.push_back(
        {{index_key::kUnitKey, unit.key},
         {index_key::kShardElements, unit.layout.shard.numel()},
         {index_key::kDtype, util::safetensors_dtype_name(unit.layout.shard.scalar_type())},
         {index_key::kParameters, parameters}});
  }
  const nlohmann::json index = {
      {index_key::kFormat, kFormat}, {index_key::kNumProcesses, processes},
      {index_key::kFiles, files},    {index_key::kUnits, described},
      {index_key::kWhole, whole},    {index_key::kOrder, order}};
  util::write_file_durably(index_file, index.dump(2) + "\n");
}

namespace {

/// A SHARDED_STATE_DICT model as saved, read by parameter name and element range on any process
/// count: each range is cut at the saved slices and read from their files, which are mapped, so
/// only the pages holding the range are read.
class SavedShards {
 public:
  SavedShards(const std::string& index_path, const std::string& folder)
      : index_path_(index_path), folder_(folder), index_(read_index(index_path)) {
    const auto files = index_.value(index_key::kFiles, nlohmann::json::array());
    const int64_t processes = index_.value(index_key::kNumProcesses, int64_t{0});
    TORCH_CHECK(
        files.is_array() && processes >= 1 && files.size() == static_cast<size_t>(processes),
        "accel: ", index_path, " names ", files.size(), " files for ", processes, " processes");
    for (const auto& file : files) files_.push_back(file.get<std::string>());
    for (const auto& unit : index_.value(index_key::kUnits, nlohmann::json::array())) {
      const auto key = unit.value(index_key::kUnitKey, "");
      const int64_t slice = unit.value(index_key::kShardElements, int64_t{0});
      TORCH_CHECK(!key.empty() && slice > 0, "accel: ", index_path,
                  " has a unit without a key or shard_elements");
      for (const auto& p : unit.value(index_key::kParameters, nlohmann::json::array())) {
        Place place{key, slice, p.value(index_key::kOffset, int64_t{-1}),
                    p.value(index_key::kShape, std::vector<int64_t>{})};
        TORCH_CHECK(place.offset >= 0, "accel: ", index_path, ": unit ", key,
                    " has a parameter without an offset");
        sharded_.emplace(p.value(index_key::kName, ""), std::move(place));
      }
    }
    for (const auto& name : index_.value(index_key::kWhole, nlohmann::json::array())) {
      whole_.push_back(name.get<std::string>());
    }
  }

  /// Checks that every saved slice's file is there, and `module`'s tensors against the saved
  /// names and shapes (none missing, none extra).
  void check(const torch::nn::Module& module) {
    std::vector<std::string> missing;
    for (const auto& file : files_) {
      if (!fs::is_regular_file(fs::path(folder_) / file)) missing.push_back(file);
    }
    TORCH_CHECK(missing.empty(), "accel: ", folder_, " is missing the model shard files ",
                c10::Join(", ", missing), " (named in ", index_path_, ")");
    std::set<std::string> names;
    for (const auto& entry : module_tensors(module)) {
      names.insert(entry.first);
      auto found = sharded_.find(entry.first);
      if (found != sharded_.end()) {
        TORCH_CHECK(found->second.shape == entry.second.sizes().vec(), "accel: ", index_path_,
                    ": tensor '", entry.first, "' has shape ",
                    c10::IntArrayRef(found->second.shape), ", the model's has ",
                    entry.second.sizes());
        continue;
      }
      TORCH_CHECK(std::count(whole_.begin(), whole_.end(), entry.first) == 1,
                  "accel: ", index_path_, " has no tensor '", entry.first,
                  "', which the model has");
      const auto saved = whole(entry.first);
      TORCH_CHECK(saved.sizes() == entry.second.sizes(), "accel: ", folder_, "/", files_[0],
                  ": tensor '", entry.first, "' has shape ", saved.sizes(), ", the model's has ",
                  entry.second.sizes());
    }
    for (const auto& entry : sharded_) {
      TORCH_CHECK(names.count(entry.first) != 0, "accel: ", index_path_, " has a tensor '",
                  entry.first, "', which the model does not have");
    }
  }

  bool sharded(const std::string& name) const { return sharded_.count(name) != 0; }

  /// Elements [begin, begin + into.numel()) of parameter `name`, flattened, into `into`.
  void read(const std::string& name, int64_t begin, torch::Tensor into) {
    const auto& place = sharded_.at(name);
    int64_t from = place.offset + begin;
    const int64_t to = from + into.numel();
    int64_t written = 0;
    while (from < to) {
      const int64_t r = from / place.slice;
      TORCH_CHECK(r < static_cast<int64_t>(files_.size()), "accel: ", index_path_, ": '", name,
                  "' reaches past the last saved slice");
      const int64_t length = std::min((r + 1) * place.slice, to) - from;
      const auto& tensors = file(r);
      auto found = tensors.find(place.key);
      const auto path = folder_ + "/" + files_[r];
      TORCH_CHECK(found != tensors.end() && found->second.numel() == place.slice, "accel: ", path,
                  " has no tensor '", place.key, "' of ", place.slice, " elements");
      into.narrow(0, written, length)
          .copy_(found->second.narrow(0, from - r * place.slice, length));
      from += length;
      written += length;
    }
  }

  /// Tensor `name` as saved whole, from process 0's file.
  torch::Tensor whole(const std::string& name) {
    const auto& tensors = file(0);
    auto found = tensors.find(name);
    TORCH_CHECK(found != tensors.end(), "accel: ", folder_, "/", files_[0], " has no tensor '",
                name, "'");
    return found->second;
  }

 private:
  struct Place {
    std::string key;
    int64_t slice = 0, offset = 0;
    std::vector<int64_t> shape;
  };
  const std::map<std::string, torch::Tensor>& file(int64_t r) {
    auto found = mapped_.find(r);
    if (found == mapped_.end()) {
      const auto path = folder_ + "/" + files_[r];
      TORCH_CHECK(fs::is_regular_file(path), "accel: the checkpoint has no ", path);
      found = mapped_.emplace(r, load_safetensors(path)).first;
    }
    return found->second;
  }

  std::string index_path_, folder_;
  nlohmann::json index_;
  std::vector<std::string> files_;
  std::map<std::string, Place> sharded_;
  std::vector<std::string> whole_;
  std::map<int64_t, std::map<std::string, torch::Tensor>> mapped_;
};

}  // namespace

void check_sharded_model(const torch::nn::Module& module, const std::string& index_path) {
  SavedShards(index_path, fs::path(index_path).parent_path().string()).check(module);
}

void load_sharded_model(torch::nn::Module& module,
                        const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                        const std::string& index_path) {
  SavedShards saved(index_path, fs::path(index_path).parent_path().string());
  saved.check(module);
  torch::NoGradGuard no_grad;
  // This process's slice of each unit, from whichever saved slices hold its elements.
  for (const auto& unit : units_of(module, shards)) {
    auto shard = unit.layout.shard.detach();
    shard.zero_();
    const int64_t begin = unit.layout.rank * shard.numel();
    const int64_t end = std::min(begin + shard.numel(), unit.layout.total);
    for (size_t i = 0; i < unit.names.size(); ++i) {
      const int64_t offset = unit.layout.offsets[i];
      const int64_t first = std::max(offset, begin);
      const int64_t last = std::min(offset + unit.layout.params[i].numel(), end);
      if (last <= first) continue;
      saved.read(unit.names[i], first - offset, shard.narrow(0, first - begin, last - first));
    }
  }
  for (auto& entry : module_tensors(module)) {
    if (is_sharded(entry.second)) continue;
    if (saved.sharded(entry.first)) {
      // Sharded when saved, whole in this run (no unit holds it now).
      saved.read(entry.first, 0, entry.second.detach().view(-1));
    } else {
      entry.second.copy_(saved.whole(entry.first));
    }
  }
  // The shards changed: units gathered before are stale.
  for (const auto& optimizer_shards : shards) {
    if (optimizer_shards->shards_parameters()) optimizer_shards->gather_parameters();
  }
}

void load_whole_from_sharded_model(torch::nn::Module& module, const std::string& index_path) {
  SavedShards saved(index_path, fs::path(index_path).parent_path().string());
  saved.check(module);
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& entry : module_tensors(module)) {
    if (saved.sharded(entry.first)) {
      auto value = torch::empty(entry.second.sizes(),
                                entry.second.options().device(torch::kCPU).requires_grad(false));
      saved.read(entry.first, 0, value.view(-1));
      tensors.emplace(entry.first, value);
    } else {
      tensors.emplace(entry.first, saved.whole(entry.first));
    }
  }
  load_module_tensors(module, tensors, index_path);
}

}  // namespace sharding
}  // namespace accel
