#pragma once

// Files that appear complete or not at all: written to a temporary sibling, flushed to disk, then
// renamed over the destination. A crash at any point leaves the previous file (or none).

#include <cstddef>
#include <cstdio>
#include <string>

namespace accel {
namespace util {

class DurableFile {
 public:
  /// Opens a temporary sibling of `path` for writing, named for this write alone
  /// (`path.tmp.<pid>.<n>`). Throws c10::Error naming `path`.
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

// ---- Folders: assembled beside their destination, then swapped in -------------------------------

/// Where a folder `dir` is assembled before commit_folder swaps it in.
std::string staging_folder_of(const std::string& dir);
/// Where the previous `dir` waits while commit_folder swaps, on filesystems that cannot exchange
/// two names atomically.
std::string backup_folder_of(const std::string& dir);

/// Swaps the complete `staging` folder into `dir` and removes the previous `dir`. Where the
/// filesystem can exchange two names atomically (renameat2 RENAME_EXCHANGE), `dir` is never
/// missing; elsewhere the old folder is renamed to backup_folder_of(dir) first, and
/// committed_folder() finds it if a crash leaves no `dir`.
void commit_folder(const std::string& staging, const std::string& dir);

/// `dir`, or, when a crash between commit_folder's two renames left no `dir` but a backup holding
/// `marker` (the file a complete folder is written with last), the backup.
std::string committed_folder(const std::string& dir, const std::string& marker);

}  // namespace util
}  // namespace accel
