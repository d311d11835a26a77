#pragma once

// The launchers of a job that spans machines, talking so that they restart and give up together
// (torchrun's rendezvous between its agents). Machine 0's launcher listens at the job's main
// address and port; every other machine's launcher connects to it. Messages are text lines:
//
//   hello <machine> <processes> <machines>    a launcher joins (checked against machine 0's)
//   start <round> <port>                      machine 0: start the group; workers meet at <port>
//   failed <round> <code> <restartable> <cause>   a launcher's group failed (as soon as it does)
//   stop <round>                              machine 0: stop your group (another one failed)
//   ended <round> <code>                      a launcher's group has ended, every process gone
//   done                                      machine 0: every group succeeded
//   give-up <code> <cause>                    machine 0: the job ends, for this cause
//
// Each round's workers meet at a port machine 0 picks for that round, so no process of a round
// that is being stopped can reach the next round's rendezvous.

#include <poll.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

struct LaunchOptions;

/// One line from a machine's launcher; `lost` when its connection closed instead.
struct LinkMessage {
  int machine = 0;
  bool lost = false;
  std::string verb;
  std::vector<std::string> words;  // the line's words after the verb
  /// The rest of the line after the first `fields` words (a cause, which has spaces).
  std::string rest(size_t fields) const;
};

class MachineLink {
 public:
  /// Machine 0: listens on main_process_port and waits up to `timeout` for every other machine's
  /// launcher. Others: connect to main_process_ip:main_process_port, retrying up to `timeout`.
  /// Throws std::runtime_error naming the address and what went wrong.
  MachineLink(const LaunchOptions& options, std::chrono::milliseconds timeout);
  ~MachineLink();
  MachineLink(const MachineLink&) = delete;
  MachineLink& operator=(const MachineLink&) = delete;

  bool coordinator() const { return machine_ == 0; }
  /// Machine 0: to every other machine; the others: to machine 0. A closed peer is skipped (its
  /// loss is reported by read_ready).
  void send(const std::string& line);
  /// The sockets to poll for incoming lines.
  void add_poll_fds(std::vector<pollfd>* fds) const;
  /// The complete lines (and lost connections) that arrived on `fds` from index `first` on.
  std::vector<LinkMessage> read_ready(const std::vector<pollfd>& fds, size_t first);
  /// Waits up to `timeout` for the next message; none when the time ran out.
  std::optional<LinkMessage> next(std::chrono::milliseconds timeout);

 private:
  struct Peer {
    int machine = 0;
    int fd = -1;
    std::string buffer;
    bool open = true;
  };
  void read_from(Peer& peer, std::vector<LinkMessage>* out);

  int machine_ = 0;
  std::vector<Peer> peers_;
  std::vector<LinkMessage> pending_;
};

}  // namespace launcher
}  // namespace accel
