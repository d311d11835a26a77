#include "accel_common/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

namespace accel {
namespace detail {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError(path + ": " + what);
}

}  // namespace

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},   {"I8", 1},  {"I16", 2},     {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},
      {"I64", 8},  {"U64", 8},  {"F64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

namespace {

/// The header length the first 8 bytes give, checked against the limit and the file's size.
uint64_t header_length(const std::string& path, const unsigned char* first8, uint64_t file_size) {
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | first8[i];
  if (length > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(length) + " is over the 100 MB limit");
  }
  if (length > file_size - 8) {
    fail(path, "header length " + std::to_string(length) + " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes)");
  }
  return length;
}

SafetensorsHeader parse_header_json(const std::string& path, const std::string& text,
                                    uint64_t file_size) {
  const uint64_t length = text.size();
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("header is not JSON: ") + e.what());
  }
  if (!json.is_object()) fail(path, "header is not a JSON object");

  SafetensorsHeader header;
  header.header_bytes = length;
  header.data_bytes = file_size - 8 - length;
  for (const auto& item : json.items()) {
    const std::string& name = item.key();
    const auto& value = item.value();
    if (name == "__metadata__") {
      if (!value.is_object()) fail(path, "__metadata__ is not an object");
      for (const auto& m : value.items()) {
        if (!m.value().is_string())
          fail(path, "__metadata__ value '" + m.key() + "' is not a string");
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
        !value.contains("data_offsets")) {
      fail(path, where + "expected an object with dtype, shape and data_offsets");
    }
    SafetensorsEntry entry;
    if (!value["dtype"].is_string()) fail(path, where + "dtype is not a string");
    entry.dtype = value["dtype"].get<std::string>();
    const int64_t element = safetensors_dtype_size(entry.dtype);
    if (element == 0) fail(path, where + "unknown dtype '" + entry.dtype + "'");
    if (!value["shape"].is_array()) fail(path, where + "shape is not a list");
    for (const auto& d : value["shape"]) {
      if (!d.is_number_unsigned()) fail(path, where + "shape holds a non-negative integer only");
      const uint64_t extent = d.get<uint64_t>();
      if (extent > static_cast<uint64_t>(INT64_MAX))
        fail(path, where + "shape holds an extent too large");
      entry.shape.push_back(static_cast<int64_t>(extent));
    }
    const auto& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      fail(path, where + "data_offsets is not a pair of non-negative integers");
    }
    entry.begin = offsets[0].get<uint64_t>();
    entry.end = offsets[1].get<uint64_t>();
    if (entry.end < entry.begin || entry.end > header.data_bytes) {
      fail(path, where + "data_offsets [" + std::to_string(entry.begin) + ", " +
                     std::to_string(entry.end) + ") are outside the data buffer of " +
                     std::to_string(header.data_bytes) + " bytes");
    }
    uint64_t expected = static_cast<uint64_t>(element);
    for (int64_t d : entry.shape) {
      if (__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected)) {
        fail(path, where + "shape " + value["shape"].dump() + " is too large");
      }
    }
    if (entry.end - entry.begin != expected) {
      fail(path, where + "shape and dtype need " + std::to_string(expected) +
                     " bytes but data_offsets span " + std::to_string(entry.end - entry.begin));
    }
    header.tensors.emplace(name, std::move(entry));
  }
  // The ranges must tile the buffer: sorted, each starts where the previous ended.
  std::vector<std::pair<uint64_t, std::string>> starts;
  for (const auto& t : header.tensors) starts.emplace_back(t.second.begin, t.first);
  std::sort(starts.begin(), starts.end());
  uint64_t position = 0;
  for (const auto& s : starts) {
    const auto& entry = header.tensors.at(s.second);
    if (entry.begin < position)
      fail(path, "tensor '" + s.second + "': data overlaps the previous tensor");
    if (entry.begin > position) {
      fail(path, "tensor '" + s.second + "': bytes " + std::to_string(position) + ".." +
                     std::to_string(entry.begin) + " of the buffer belong to no tensor");
    }
    position = entry.end;
  }
  if (position != header.data_bytes) {
    fail(path, "the last " + std::to_string(header.data_bytes - position) +
                   " bytes of the buffer belong to no tensor");
  }
  return header;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const std::string& name, const char* data, size_t size) {
  if (size < 8) fail(name, "is " + std::to_string(size) + " bytes, too short for a header");
  const uint64_t length = header_length(name, reinterpret_cast<const unsigned char*>(data), size);
  return parse_header_json(name, std::string(data + 8, length), size);
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, "cannot be read");
  const auto file_size = static_cast<uint64_t>(in.tellg());
  if (file_size < 8)
    fail(path, "is " + std::to_string(file_size) + " bytes, too short for a header");
  in.seekg(0);
  unsigned char first8[8];
  in.read(reinterpret_cast<char*>(first8), 8);
  const uint64_t length = header_length(path, first8, file_size);
  std::string text(length, '\0');
  in.read(&text[0], static_cast<std::streamsize>(length));
  if (!in) fail(path, "ended while its header was read");
  return parse_header_json(path, text, file_size);
}

std::vector<std::string> read_safetensors_index(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot be read");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("is not JSON: ") + e.what());
  }
  if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object()) {
    fail(path, "expected an object with a weight_map");
  }
  const auto slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::vector<std::string> shards;
  std::set<std::string> seen;
  for (const auto& item : json["weight_map"].items()) {
    if (!item.value().is_string())
      fail(path, "weight_map['" + item.key() + "'] is not a file name");
    const std::string file = item.value().get<std::string>();
    if (file.find('/') != std::string::npos || file == "..") {
      fail(path,
           "weight_map['" + item.key() + "'] names '" + file + "' outside the index's folder");
    }
    if (seen.insert(file).second) shards.push_back(folder + file);
  }
  return shards;
}

}  // namespace detail
}  // namespace accel
