#include "merge_weights.h"

#include "accel_common/checkpoint_folder.h"
#include "accel_common/sharded_checkpoint.h"

#include "accel_common/progress_bar.h"
#include "accel_common/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

namespace accel {
namespace launcher {
namespace {

namespace fs = std::filesystem;

using sharded_checkpoint::kFormat;
using sharded_checkpoint::kIndexSuffix;
namespace index_key = sharded_checkpoint::key;
// Merges at least this big show a progress bar even when stderr is not a terminal.
constexpr uint64_t kProgressLogBytes = uint64_t{256} << 20;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw MergeError(path + ": " + problem);
}

/// One process's shard file: its header and an open descriptor.
struct ShardFile {
  std::string path;
  detail::SafetensorsHeader header;
  int fd = -1;
  ShardFile() = default;
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;
  ~ShardFile() {
    if (fd >= 0) ::close(fd);
  }

  const detail::SafetensorsEntry& entry(const std::string& name) const {
    auto found = header.tensors.find(name);
    if (found == header.tensors.end()) fail(path, "has no tensor '" + name + "'");
    return found->second;
  }
  /// `bytes` bytes of tensor `name`'s data from byte `from` of it.
  void read(const std::string& name, uint64_t from, uint64_t bytes, char* into) const {
    const auto& e = entry(name);
    if (from + bytes > e.end - e.begin) fail(path, "tensor '" + name + "' is too short");
    uint64_t done = 0;
    const uint64_t base = 8 + header.header_bytes + e.begin + from;
    while (done < bytes) {
      const ssize_t got = ::pread(fd, into + done, bytes - done, static_cast<off_t>(base + done));
      if (got <= 0) fail(path, got == 0 ? "ends early" : std::strerror(errno));
      done += static_cast<uint64_t>(got);
    }
  }
};

struct Parameter {
  std::vector<int64_t> shape;
  int64_t offset = 0;
  size_t unit = 0;
};

struct Unit {
  std::string key, dtype;
  int64_t shard_elements = 0;
};

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot be read");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("is not valid JSON: ") + e.what());
  }
}

/// The index's shard files, opened, in process order.
std::vector<std::unique_ptr<ShardFile>> open_shard_files(const nlohmann::json& index,
                                                         const fs::path& index_path) {
  const std::string where = index_path.string();
  std::vector<std::unique_ptr<ShardFile>> files;
  try {
    for (const auto& name : index.at(index_key::kFiles)) {
      auto file = std::make_unique<ShardFile>();
      file->path = (index_path.parent_path() / name.get<std::string>()).string();
      file->header = detail::read_safetensors_header(file->path);
      file->fd = ::open(file->path.c_str(), O_RDONLY | O_CLOEXEC);
      if (file->fd < 0) fail(file->path, std::strerror(errno));
      files.push_back(std::move(file));
    }
  } catch (const detail::SafetensorsError& e) {
    throw MergeError(e.what());
  } catch (const nlohmann::json::exception& e) {
    fail(where, std::string("has no usable \"files\" list: ") + e.what());
  }
  if (files.empty() ||
      static_cast<int64_t>(files.size()) != index.value(index_key::kNumProcesses, 0)) {
    fail(where, "names " + std::to_string(files.size()) + " shard files for num_processes " +
                    std::to_string(index.value(index_key::kNumProcesses, 0)));
  }
  return files;
}

/// Where each tensor's bytes are, from the index: the units the processes' shards are cut from,
/// the parameters in them, the tensors kept whole, and the model's order.
struct MergePlan {
  std::vector<Unit> units;
  std::map<std::string, Parameter> sharded;
  std::map<std::string, detail::SafetensorsEntry> whole;
  std::vector<std::string> order;
};

MergePlan read_plan(const nlohmann::json& index,
                    const std::vector<std::unique_ptr<ShardFile>>& files,
                    const std::string& where) {
  MergePlan plan;
  auto& units = plan.units;
  auto& sharded = plan.sharded;
  auto& whole = plan.whole;
  try {
    for (const auto& u : index.at(index_key::kUnits)) {
      Unit unit{u.at(index_key::kUnitKey).get<std::string>(),
                u.at(index_key::kDtype).get<std::string>(),
                u.at(index_key::kShardElements).get<int64_t>()};
      if (detail::safetensors_dtype_size(unit.dtype) == 0) {
        fail(where, "unit '" + unit.key + "' has unknown dtype " + unit.dtype);
      }
      for (const auto& file : files) {
        const auto& e = file->entry(unit.key);
        if (e.dtype != unit.dtype || e.numel() != unit.shard_elements) {
          fail(file->path, "tensor '" + unit.key + "' is not " +
                               std::to_string(unit.shard_elements) + " elements of " + unit.dtype);
        }
      }
      for (const auto& p : u.at(index_key::kParameters)) {
        Parameter parameter{p.at(index_key::kShape).get<std::vector<int64_t>>(),
                            p.at(index_key::kOffset).get<int64_t>(), units.size()};
        const int64_t end = parameter.offset + elements(parameter.shape);
        if (parameter.offset < 0 ||
            end > unit.shard_elements * static_cast<int64_t>(files.size())) {
          fail(where, "parameter '" + p.at(index_key::kName).get<std::string>() +
                          "' lies outside its unit");
        }
        sharded[p.at(index_key::kName).get<std::string>()] = parameter;
      }
      units.push_back(unit);
    }
    for (const auto& name : index.at(index_key::kWhole)) {
      whole[name.get<std::string>()] = files.front()->entry(name.get<std::string>());
    }
    plan.order = index.at(index_key::kOrder).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail(where, std::string("is malformed: ") + e.what());
  }
  return plan;
}

/// The merged file's header: every tensor in the model's order, data end to end (8-byte aligned
/// after the header); `data_bytes` is set to the data's size.
std::string merged_header(const MergePlan& plan, const std::string& where,
                          uint64_t* data_bytes_out) {
  const auto& units = plan.units;
  const auto& sharded = plan.sharded;
  const auto& whole = plan.whole;
  const auto& order = plan.order;
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t data_bytes = 0;
  for (const auto& name : order) {
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t bytes = 0;
    if (auto p = sharded.find(name); p != sharded.end()) {
      dtype = units[p->second.unit].dtype;
      shape = p->second.shape;
      bytes = static_cast<uint64_t>(elements(shape) * detail::safetensors_dtype_size(dtype));
    } else if (auto w = whole.find(name); w != whole.end()) {
      dtype = w->second.dtype;
      shape = w->second.shape;
      bytes = w->second.end - w->second.begin;
    } else {
      fail(where, "lists '" + name + "' in \"order\" but neither shards nor keeps it whole");
    }
    header[name] = {
        {"dtype", dtype}, {"shape", shape}, {"data_offsets", {data_bytes, data_bytes + bytes}}};
    data_bytes += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  *data_bytes_out = data_bytes;
  return json;
}

/// Tensor `name`'s bytes, read from the shard files into `buffer`.
void read_merged_tensor(const std::string& name, const MergePlan& plan,
                        const std::vector<std::unique_ptr<ShardFile>>& files,
                        std::vector<char>& buffer) {
  const auto& units = plan.units;
  const auto& sharded = plan.sharded;
  const auto& whole = plan.whole;
  if (auto p = sharded.find(name); p != sharded.end()) {
    // Process r holds elements [r S, (r + 1) S) of the unit: the parameter's range is read
    // from each process that holds part of it.
    const auto& unit = units[p->second.unit];
    const int64_t size = detail::safetensors_dtype_size(unit.dtype);
    const int64_t begin = p->second.offset, end = begin + elements(p->second.shape);
    buffer.resize(static_cast<size_t>((end - begin) * size));
    for (size_t r = 0; r < files.size(); ++r) {
      const int64_t held_begin = static_cast<int64_t>(r) * unit.shard_elements;
      const int64_t first = std::max(begin, held_begin);
      const int64_t last = std::min(end, held_begin + unit.shard_elements);
      if (last <= first) continue;
      files[r]->read(unit.key, static_cast<uint64_t>((first - held_begin) * size),
                     static_cast<uint64_t>((last - first) * size),
                     buffer.data() + (first - begin) * size);
    }
  } else {
    const auto& e = whole.at(name);
    buffer.resize(e.end - e.begin);
    files.front()->read(name, 0, buffer.size(), buffer.data());
  }
}

std::string merge_one(const fs::path& index_path, const fs::path& output_dir) {
  const std::string where = index_path.string();
  const auto index = read_json(where);
  if (!index.is_object() || index.value(index_key::kFormat, "") != kFormat) {
    fail(where,
         std::string("is not a sharded state dict index (no \"format\": \"") + kFormat + "\")");
  }
  const auto files = open_shard_files(index, index_path);
  const MergePlan plan = read_plan(index, files, where);
  uint64_t data_bytes = 0;
  const std::string json = merged_header(plan, where, &data_bytes);

  const auto stem = index_path.filename().string();
  const auto output =
      output_dir / (stem.substr(0, stem.size() - std::strlen(kIndexSuffix)) + ".safetensors");
  const auto partial = fs::path(output.string() + ".partial");
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) fail(partial.string(), "cannot be written");
    uint64_t length = json.size();
    char prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((length >> (8 * i)) & 0xff);
    out.write(prefix, 8);
    out.write(json.data(), static_cast<std::streamsize>(json.size()));
    std::vector<char> buffer;
    // A bar on a terminal, or in a log for merges big enough to take a while.
    progress_bar::Renderer::Settings bar;
    bar.description = "merging " + output.filename().string();
    bar.total = static_cast<int64_t>(plan.order.size());
    bar.unit = "tensor";
    bar.enabled = ::isatty(STDERR_FILENO) == 1 || data_bytes >= kProgressLogBytes;
    progress_bar::Renderer written(bar);
    for (const auto& name : plan.order) {
      written.update();
      read_merged_tensor(name, plan, files, buffer);
      out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    }
    out.flush();
    if (!out) fail(partial.string(), "could not be written completely");
  }
  fs::rename(partial, output);
  return output.string();
}

/// A FULL_STATE_DICT checkpoint (a tensor-parallel one's too: its slices are gathered when it is
/// saved) holds its weights whole already: each model's file is copied, checked first.
std::vector<std::string> copy_whole_weights(const fs::path& checkpoint_dir,
                                            const fs::path& output_dir) {
  const auto state = checkpoint_dir / checkpoint_folder::kStateFile;
  if (!fs::is_regular_file(state)) {
    fail(checkpoint_dir.string(),
         "has no *.shards.json and no accel_state.json: it is not a save_state checkpoint");
  }
  const auto summary = read_json(state.string());
  const std::string type =
      summary.is_object() ? summary.value(checkpoint_folder::key::kStateDictType, "") : "";
  if (type != "FULL_STATE_DICT") {
    fail(state.string(),
         "names state_dict_type '" + type + "' and the folder has no *.shards.json to merge");
  }
  const int64_t models = summary.value(checkpoint_folder::key::kModels, int64_t{0});
  std::vector<std::string> written;
  fs::create_directories(output_dir);
  for (int64_t i = 0; i < models; ++i) {
    const std::string name = checkpoint_folder::model_file(static_cast<size_t>(i));
    const auto from = checkpoint_dir / name;
    try {
      detail::read_safetensors_header(from.string());
    } catch (const detail::SafetensorsError& e) {
      fail(from.string(), e.what());
    }
    const auto output = output_dir / name;
    const auto partial = fs::path(output.string() + ".partial");
    fs::copy_file(from, partial, fs::copy_options::overwrite_existing);
    fs::rename(partial, output);
    written.push_back(output.string());
  }
  return written;
}

}  // namespace

std::vector<std::string> merge_weights(const std::string& checkpoint_dir,
                                       const std::string& output_dir) {
  if (!fs::is_directory(checkpoint_dir)) fail(checkpoint_dir, "is not a folder");
  std::vector<fs::path> indexes;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir)) {
    const auto name = entry.path().filename().string();
    if (name.size() > std::strlen(kIndexSuffix) &&
        name.compare(name.size() - std::strlen(kIndexSuffix), std::string::npos, kIndexSuffix) ==
            0) {
      indexes.push_back(entry.path());
    }
  }
  if (indexes.empty()) return copy_whole_weights(checkpoint_dir, output_dir);
  std::sort(indexes.begin(), indexes.end());
  fs::create_directories(output_dir);
  std::vector<std::string> written;
  for (const auto& index : indexes) written.push_back(merge_one(index, output_dir));
  return written;
}

}  // namespace launcher
}  // namespace accel
