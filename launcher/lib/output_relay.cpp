#include "output_relay.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace accel {
namespace launcher {
namespace {

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

OutputRelay::OutputRelay(bool rank_prefix, std::optional<std::string> log_dir)
    : rank_prefix_(rank_prefix), log_dir_(std::move(log_dir)) {
  if (log_dir_) ::mkdir(log_dir_->c_str(), 0755);
}

OutputRelay::~OutputRelay() {
  flush();
  for (auto& s : streams_) {
    if (s.fd >= 0) ::close(s.fd);
  }
}

void OutputRelay::add(int rank, int fd, int target_fd) {
  streams_.push_back({rank, fd, target_fd, {}});
  if (log_dir_ && logs_.count(rank) == 0) {
    logs_[rank] =
        std::make_unique<std::ofstream>(*log_dir_ + "/rank_" + std::to_string(rank) + ".log");
  }
}

void OutputRelay::append_poll_fds(std::vector<pollfd>* fds) const {
  for (const auto& s : streams_) {
    if (s.fd >= 0) fds->push_back({s.fd, POLLIN, 0});
  }
}

void OutputRelay::read_ready(const std::vector<pollfd>& fds, size_t first) {
  for (size_t i = first; i < fds.size(); ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    for (auto& s : streams_) {
      if (s.fd == fds[i].fd) read_stream(s);
    }
  }
}

void OutputRelay::read_stream(Stream& stream) {
  char buffer[8192];
  const ssize_t n = ::read(stream.fd, buffer, sizeof(buffer));
  if (n <= 0) {
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    ::close(stream.fd);
    stream.fd = -1;
    if (!stream.pending.empty()) emit(stream, stream.pending + "\n");
    stream.pending.clear();
    return;
  }
  stream.pending.append(buffer, static_cast<size_t>(n));
  size_t start = 0, newline;
  while ((newline = stream.pending.find('\n', start)) != std::string::npos) {
    emit(stream, stream.pending.substr(start, newline - start + 1));
    start = newline + 1;
  }
  stream.pending.erase(0, start);
}

void OutputRelay::emit(Stream& stream, const std::string& line) {
  const std::string text =
      rank_prefix_ ? "[rank " + std::to_string(stream.rank) + "] " + line : line;
  write_all(stream.target_fd, text);
  auto log = logs_.find(stream.rank);
  if (log != logs_.end()) *log->second << line << std::flush;
}

void OutputRelay::flush() {
  for (auto& s : streams_) {
    if (s.pending.empty()) continue;
    emit(s, s.pending + "\n");
    s.pending.clear();
  }
}

void OutputRelay::drain(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds;
    append_poll_fds(&fds);
    if (fds.empty()) break;
    ::poll(fds.data(), fds.size(), 50);
    read_ready(fds, 0);
  }
  flush();
}

}  // namespace launcher
}  // namespace accel
