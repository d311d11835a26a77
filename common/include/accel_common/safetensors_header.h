#pragma once

// Reading and validating a safetensors header (8-byte little-endian length, then JSON naming each
// tensor's dtype, shape and data_offsets). Free of LibTorch: the launcher reads headers too
// (accel estimate-memory).

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace accel {
namespace detail {

struct SafetensorsEntry {
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t header_bytes = 0;  // the JSON's length
  uint64_t data_bytes = 0;    // the buffer after it
};

/// A file that is not a valid safetensors file; what() names the file (and the tensor).
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bytes per element of a safetensors dtype name; 0 when unknown.
int64_t safetensors_dtype_size(const std::string& dtype);

/// Reads and checks the header of `path`: header length within the file and at most 100 MB,
/// JSON, known dtypes, shape x dtype size equal to the byte range, ranges inside the buffer, not
/// overlapping, and together covering it. Throws SafetensorsError.
SafetensorsHeader read_safetensors_header(const std::string& path);

/// The same checks on a file held in memory (`data`, `size` bytes), named `name` in errors.
SafetensorsHeader parse_safetensors_header(const std::string& name, const char* data, size_t size);

/// The shard files a model.safetensors.index.json names (weight_map values), in order, with
/// paths relative to the index's folder resolved. Throws SafetensorsError.
std::vector<std::string> read_safetensors_index(const std::string& path);

}  // namespace detail
}  // namespace accel
