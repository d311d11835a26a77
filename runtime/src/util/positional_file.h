#pragma once

// A file opened for reading at given offsets (pread), shared by everything that reads from it:
// checkpoint loading and, for weights offloaded to disk, every forward that needs them.

#include <cstdint>
#include <string>

namespace accel {
namespace util {

class PositionalFile {
 public:
  /// Opens `path`; throws c10::Error naming the file when it cannot be read.
  explicit PositionalFile(std::string path);
  ~PositionalFile();
  PositionalFile(const PositionalFile&) = delete;
  PositionalFile& operator=(const PositionalFile&) = delete;

  /// Reads exactly `bytes` at `offset` into `into`; `what` names the tensor in errors.
  void read_at(void* into, uint64_t bytes, uint64_t offset, const std::string& what) const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace util
}  // namespace accel
