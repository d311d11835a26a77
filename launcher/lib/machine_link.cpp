#include "machine_link.h"

#include "launch.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace accel {
namespace launcher {
namespace {

using Clock = std::chrono::steady_clock;

std::runtime_error link_error(const std::string& what) { return std::runtime_error(what); }

void send_all(int fd, const std::string& line) {
  size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the peer is gone: read_ready reports it
    sent += static_cast<size_t>(n);
  }
}

int listen_on(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    throw link_error("cannot listen on port " + std::to_string(port) +
                     " for the other machines' launchers: " + reason);
  }
  return fd;
}

/// A connection to host:port, retried until `deadline`; -1 when none was made.
int connect_until(const std::string& host, int port, Clock::time_point deadline,
                  std::string* last_error) {
  while (Clock::now() < deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int status = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (status != 0) {
      *last_error = ::gai_strerror(status);
    } else {
      for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(found);
          return fd;
        }
        *last_error = std::strerror(errno);
        ::close(fd);
      }
      ::freeaddrinfo(found);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

std::vector<std::string> words_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

}  // namespace

std::string LinkMessage::rest(size_t fields) const {
  std::string out;
  for (size_t i = fields; i < words.size(); ++i) out += (out.empty() ? "" : " ") + words[i];
  return out;
}

MachineLink::MachineLink(const LaunchOptions& o, std::chrono::milliseconds timeout)
    : machine_(o.machine_rank) {
  const int port = o.main_process_port.value_or(29500);
  const auto deadline = Clock::now() + timeout;
  const std::string hello = "hello " + std::to_string(o.machine_rank) + " " +
                            std::to_string(o.num_processes) + " " + std::to_string(o.num_machines) +
                            "\n";
  if (!coordinator()) {
    std::string error = "no answer";
    const int fd = connect_until(o.main_process_ip, port, deadline, &error);
    if (fd < 0) {
      throw link_error("could not reach machine 0's launcher at " + o.main_process_ip + ":" +
                       std::to_string(port) + " within " + std::to_string(timeout.count() / 1000) +
                       " s (" + error + ")");
    }
    peers_.push_back({0, fd, "", true});
    send(hello);
    return;
  }
  const int listener = listen_on(port);
  std::vector<bool> joined(static_cast<size_t>(o.num_machines), false);
  joined[0] = true;
  std::string failure;
  while (peers_.size() + 1 < static_cast<size_t>(o.num_machines) && failure.empty()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd ready{listener, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&ready, 1, static_cast<int>(left.count())) <= 0) {
      failure = std::to_string(o.num_machines - 1 - static_cast<int>(peers_.size())) +
                " machine(s) did not join within " + std::to_string(timeout.count() / 1000) + " s";
      break;
    }
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Peer peer{-1, fd, "", true};
    // Its hello, then it counts.
    std::vector<LinkMessage> got;
    while (got.empty() && peer.open && Clock::now() < deadline) {
      pollfd line{fd, POLLIN, 0};
      if (::poll(&line, 1, 1000) > 0) read_from(peer, &got);
    }
    const auto words = got.empty() ? std::vector<std::string>{} : got.front().words;
    if (got.empty() || got.front().verb != "hello" || words.size() != 3) {
      ::close(fd);
      continue;  // not a launcher
    }
    const int machine = std::atoi(words[0].c_str());
    if (std::atoi(words[1].c_str()) != o.num_processes ||
        std::atoi(words[2].c_str()) != o.num_machines) {
      failure = "machine " + words[0] + "'s launcher was started with --num_processes " + words[1] +
                " --num_machines " + words[2] + ", machine 0's with --num_processes " +
                std::to_string(o.num_processes) + " --num_machines " +
                std::to_string(o.num_machines);
    } else if (machine < 1 || machine >= o.num_machines || joined[static_cast<size_t>(machine)]) {
      failure = "two launchers joined as machine " + words[0];
    }
    peer.machine = machine;
    peers_.push_back(std::move(peer));
    if (failure.empty()) joined[static_cast<size_t>(machine)] = true;
  }
  ::close(listener);
  if (!failure.empty()) {
    send("give-up 2 " + failure + "\n");
    throw link_error(failure);
  }
}

MachineLink::~MachineLink() {
  for (auto& peer : peers_) ::close(peer.fd);
}

void MachineLink::send(const std::string& line) {
  const std::string framed = line.empty() || line.back() != '\n' ? line + "\n" : line;
  for (auto& peer : peers_) {
    if (peer.open) send_all(peer.fd, framed);
  }
}

void MachineLink::add_poll_fds(std::vector<pollfd>* fds) const {
  for (const auto& peer : peers_) fds->push_back({peer.open ? peer.fd : -1, POLLIN, 0});
}

void MachineLink::read_from(Peer& peer, std::vector<LinkMessage>* out) {
  char chunk[4096];
  const ssize_t n = ::recv(peer.fd, chunk, sizeof(chunk), MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    peer.open = false;
    LinkMessage lost;
    lost.machine = peer.machine;
    lost.lost = true;
    out->push_back(lost);
    return;
  }
  if (n < 0) return;
  peer.buffer.append(chunk, static_cast<size_t>(n));
  for (size_t end; (end = peer.buffer.find('\n')) != std::string::npos;) {
    auto words = words_of(peer.buffer.substr(0, end));
    peer.buffer.erase(0, end + 1);
    if (words.empty()) continue;
    LinkMessage message;
    message.machine = peer.machine;
    message.verb = words.front();
    message.words.assign(words.begin() + 1, words.end());
    out->push_back(std::move(message));
  }
}

std::vector<LinkMessage> MachineLink::read_ready(const std::vector<pollfd>& fds, size_t first) {
  std::vector<LinkMessage> out = std::move(pending_);
  pending_.clear();
  for (size_t i = 0; i < peers_.size() && first + i < fds.size(); ++i) {
    if (peers_[i].open && (fds[first + i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      read_from(peers_[i], &out);
    }
  }
  return out;
}

std::optional<LinkMessage> MachineLink::next(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (pending_.empty()) {
    std::vector<pollfd> fds;
    add_poll_fds(&fds);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) continue;
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (peers_[i].open && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        read_from(peers_[i], &pending_);
      }
    }
  }
  auto message = pending_.front();
  pending_.erase(pending_.begin());
  return message;
}

}  // namespace launcher
}  // namespace accel
