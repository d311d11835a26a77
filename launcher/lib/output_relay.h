#pragma once

// Copies the processes' output to the launcher's stdout/stderr line by line, optionally prefixed
// with "[rank N] " and also written to one log file per rank (--rank_prefix, --tee).

#include <poll.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

class OutputRelay {
 public:
  OutputRelay(bool rank_prefix, std::optional<std::string> log_dir);
  ~OutputRelay();

  /// Relays `fd` (the read end of a process's pipe) to `target_fd`.
  void add(int rank, int fd, int target_fd);
  /// Adds the open pipes to `fds` (after the entries already there).
  void append_poll_fds(std::vector<pollfd>* fds) const;
  /// Reads the pipes that `fds[first...]` report ready.
  void read_ready(const std::vector<pollfd>& fds, size_t first);
  /// Writes any partial lines held back.
  void flush();
  /// Reads what is left in the pipes for at most `limit`, then closes them.
  void drain(std::chrono::milliseconds limit);

 private:
  struct Stream {
    int rank;
    int fd;
    int target_fd;
    std::string pending;
  };
  void read_stream(Stream& stream);
  void emit(Stream& stream, const std::string& line);

  bool rank_prefix_;
  std::optional<std::string> log_dir_;
  std::vector<Stream> streams_;
  std::map<int, std::unique_ptr<std::ofstream>> logs_;
};

}  // namespace launcher
}  // namespace accel
