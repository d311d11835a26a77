#include "positional_file.h"

#include <c10/util/Exception.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace accel {
namespace util {

PositionalFile::PositionalFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd_ >= 0, "accel: cannot read ", path_, ": ", std::strerror(errno));
}

PositionalFile::~PositionalFile() { ::close(fd_); }

void PositionalFile::read_at(void* into, uint64_t bytes, uint64_t offset,
                             const std::string& what) const {
  auto* out = static_cast<char*>(into);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, out, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    TORCH_CHECK(n > 0, "accel: reading tensor '", what, "' of ", path_,
                " failed: ", n == 0 ? "the file ended" : std::strerror(errno));
    out += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
}

}  // namespace util
}  // namespace accel
