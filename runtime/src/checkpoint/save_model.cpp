#include "save_model.h"

#include <accel/parse_size.h>
#include <accel/safetensors.h>

#include "sharding/module_tensors.h"
#include "util/durable_file.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>

namespace accel::checkpoints {
namespace {

namespace fs = std::filesystem;

constexpr const char* kWeightsName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";

std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

/// Shards in the module's order: a tensor that would overflow the current shard starts the next
/// one; a tensor larger than the limit gets a shard of its own (as huggingface_hub splits).
std::vector<NamedTensors> split_into_shards(const NamedTensors& tensors, int64_t max_shard_bytes) {
  std::vector<NamedTensors> shards(1);
  int64_t current = 0;
  for (const auto& entry : tensors) {
    const int64_t bytes = entry.second.numel() * entry.second.element_size();
    if (!shards.back().empty() && current + bytes > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(entry);
    current += bytes;
  }
  return shards;
}

/// Weight files of an earlier save that the new one did not write: its shards, and the single
/// file or the index of the other layout.
void remove_stale_weights(const fs::path& dir, const std::set<std::string>& written) {
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    const bool ours = std::regex_match(name, shard) || name == kWeightsName || name == kIndexName;
    if (ours && entry.is_regular_file() && written.count(name) == 0) fs::remove(entry.path());
  }
}

}  // namespace

void save_model(const torch::nn::Module& module, const std::string& dir,
                const SaveModelOptions& options, bool main_process) {
  // FULL_SHARD: every process takes part in gathering the weights; the main one keeps them.
  const bool sharded = sharding::has_sharded_parameters(module);
  TORCH_CHECK(!sharded || options.safe_serialization(),
              "accel: save_model of a FULL_SHARD model writes safetensors only "
              "(safe_serialization=true)");
  if (options.safe_serialization()) {
    NamedTensors tensors;
    if (sharded) tensors = sharding::module_tensors_to_save(module, main_process);
    if (main_process && !sharded) tensors = sharding::module_tensors(module);
    save_model_tensors(tensors, dir, options, main_process);
    return;
  }
  if (!main_process) return;
  fs::create_directories(dir);
  torch::serialize::OutputArchive archive;
  module.save(archive);
  util::DurableFile file((fs::path(dir) / "model.pt").string());
  archive.save_to([&](const void* data, size_t size) {
    file.write(data, size);
    return size;
  });
  file.commit();
}

void save_model_tensors(const NamedTensors& tensors, const std::string& dir,
                        const SaveModelOptions& options, bool main_process) {
  const std::string& max_shard_size = options.max_shard_size();
  const int64_t max_shard_bytes = parse_size(max_shard_size);
  TORCH_CHECK(max_shard_bytes > 0, "accel: save_model max_shard_size must be > 0, got '",
              max_shard_size, "'");
  TORCH_CHECK(options.safe_serialization(),
              "accel: save_model of a model held in parts across processes (a pipeline's "
              "stages) writes safetensors only (safe_serialization=true)");
  if (!main_process) return;
  fs::create_directories(dir);
  const fs::path folder(dir);
  const auto shards = split_into_shards(tensors, max_shard_bytes);
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::set<std::string> written;
  if (shards.size() == 1) {
    save_safetensors((folder / kWeightsName).string(), shards.front(), metadata);
    written.insert(kWeightsName);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const auto name = shard_name(i, shards.size());
      save_safetensors((folder / name).string(), shards[i], metadata);
      written.insert(name);
      for (const auto& entry : shards[i]) weight_map[entry.first] = name;
    }
    nlohmann::json index = {{"metadata", {{"total_size", safetensors_data_bytes(tensors)}}},
                            {"weight_map", weight_map}};
    // The index last: a reader never finds one naming shards that are not there yet.
    util::write_file_durably((folder / kIndexName).string(), index.dump(2) + "\n");
    written.insert(kIndexName);
  }
  remove_stale_weights(folder, written);
}

}  // namespace accel::checkpoints
