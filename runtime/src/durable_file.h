#pragma once

// Files that appear complete or not at all: written to a temporary sibling, flushed to disk, then
// renamed over the destination. A crash at any point leaves the previous file (or none).

#include <cstddef>
#include <cstdio>
#include <string>

namespace accel {
namespace detail {

class DurableFile {
 public:
  /// Opens a temporary sibling of `path` for writing. Throws c10::Error naming `path`.
  explicit DurableFile(std::string path);
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;
  /// Without commit(), removes the temporary file: `path` is untouched.
  ~DurableFile();

  void write(const void* data, size_t size);
  void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
  /// Flushes, fsyncs, renames over `path` and fsyncs the folder.
  void commit();

 private:
  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
};

/// Writes `bytes` to `path` through a DurableFile.
void write_file_durably(const std::string& path, const std::string& bytes);

/// Reads a whole file; throws c10::Error naming it.
std::string read_file(const std::string& path);

/// fsyncs a folder so that renames inside it survive a crash.
void sync_directory(const std::string& path);

}  // namespace detail
}  // namespace accel
