#include "durable_file.h"

#include <c10/util/Exception.h>

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace accel {
namespace util {
namespace {

/// A temporary sibling of `path` no other write uses: the process's id and a number of its own,
/// so two threads (the flight recorder's watchdog and a failed collective's callback) writing one
/// destination never share a temporary file.
std::string temporary_sibling(const std::string& path) {
  static std::atomic<uint64_t> writes{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++writes);
}

}  // namespace

DurableFile::DurableFile(std::string path)
    : path_(std::move(path)), temp_path_(temporary_sibling(path_)) {
  file_ = std::fopen(temp_path_.c_str(), "wb");
  TORCH_CHECK(file_ != nullptr, "accel: cannot write ", path_, ": ", std::strerror(errno));
}

DurableFile::~DurableFile() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  std::remove(temp_path_.c_str());
}

void DurableFile::write(const void* data, size_t size) {
  TORCH_CHECK(file_ != nullptr, "accel: ", path_, " was already committed");
  if (size == 0) return;
  TORCH_CHECK(std::fwrite(data, 1, size, file_) == size, "accel: writing ", path_,
              " failed: ", std::strerror(errno));
}

void DurableFile::commit() {
  TORCH_CHECK(file_ != nullptr, "accel: ", path_, " was already committed");
  const bool flushed = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const int error = errno;
  std::fclose(file_);
  file_ = nullptr;
  if (!flushed || std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int rename_error = flushed ? errno : error;
    std::remove(temp_path_.c_str());
    TORCH_CHECK(false, "accel: writing ", path_, " failed: ", std::strerror(rename_error));
  }
  const auto parent = std::filesystem::path(path_).parent_path();
  sync_directory(parent.empty() ? "." : parent.string());
}

void write_file_durably(const std::string& path, const std::string& bytes) {
  DurableFile file(path);
  file.write(bytes);
  file.commit();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.good(), "accel: cannot read ", path, ": ", std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string staging_folder_of(const std::string& dir) { return dir + ".partial"; }
std::string backup_folder_of(const std::string& dir) { return dir + ".old"; }

void commit_folder(const std::string& staging, const std::string& dir) {
  namespace fs = std::filesystem;
  const auto parent = fs::path(dir).parent_path().string();
  sync_directory(staging);
  if (fs::exists(dir)) {
#ifdef RENAME_EXCHANGE
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      sync_directory(parent);
      fs::remove_all(staging);  // now the previous folder
      return;
    }
#endif
    const auto backup = backup_folder_of(dir);
    fs::remove_all(backup);
    fs::rename(dir, backup);
    fs::rename(staging, dir);
    sync_directory(parent);
    fs::remove_all(backup);
    return;
  }
  fs::rename(staging, dir);
  sync_directory(parent);
  fs::remove_all(backup_folder_of(dir));
}

std::string committed_folder(const std::string& dir, const std::string& marker) {
  namespace fs = std::filesystem;
  const auto backup = backup_folder_of(dir);
  if (!fs::exists(dir) && fs::exists(fs::path(backup) / marker)) return backup;
  return dir;
}

}  // namespace util
}  // namespace accel
