#pragma once

// One start of this machine's share of a job: its processes spawned with the torchrun
// environment, watched through the launcher's signalfd, their output relayed, their flight
// records judged, and all of them stopped when one fails, a hang is proven, the launcher is
// interrupted, or another machine's launcher asks.

#include "flight_table.h"
#include "launch.h"
#include "output_relay.h"

#include <poll.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

/// How one start of the group ended.
struct GroupResult {
  int code = 0;              // the launcher's exit code for it
  bool interrupted = false;  // the launcher was asked to stop: no restart
  std::string cause;         // "rank 1 (pid 123) exited with code 3"
  bool stopped = false;      // stopped because another machine's group failed (not a failure)
  /// The process that failed died of a collective's error (a peer went away): the consequence
  /// of another failure, which a machine's report may yet name.
  bool consequence = false;
};

/// What else a group's watch listens to: the other machines' launchers (see MachineLink).
class GroupWatch {
 public:
  virtual ~GroupWatch() = default;
  virtual void add_poll_fds(std::vector<pollfd>* fds) = 0;
  /// After each poll, with the fds it added from `first` on: a reason to stop this machine's
  /// group, when another machine's asks for it.
  virtual std::optional<std::string> check(const std::vector<pollfd>& fds, size_t first) = 0;
  /// This machine's group has failed or was interrupted (called once, as soon as it is).
  virtual void failed(const GroupResult& group) = 0;
};

class LocalGroup {
 public:
  /// `original`: the signal mask the launcher started with, which the processes get back;
  /// `watch`: the other machines' launchers, or null on one machine.
  LocalGroup(const LaunchOptions& options, int port, int restart, const sigset_t& original,
             GroupWatch* watch);

  /// Starts the processes and watches them (SIGCHLD, SIGINT, SIGTERM and SIGHUP arrive on
  /// `signal_fd`) until all have ended.
  GroupResult run(int signal_fd);

 private:
  struct Child {
    int rank = 0;
    pid_t pid = -1;
    bool running = true;
  };
  using Clock = std::chrono::steady_clock;

  /// Forks and execs every process; false (and the result says why) when it cannot.
  bool spawn();
  /// One round of waiting: output, the watch, signals, ended processes, hangs, the grace period.
  void poll_once(int signal_fd);
  void handle_signals(int signal_fd);
  /// Collects the processes that ended or were stopped.
  void reap();
  /// The group's first failure: says so, with where the others wait, and stops the rest.
  void fail(const Child& child, int status, int code);
  /// A process past the watchdog in a collective: the group stops when its records prove it
  /// can never finish; otherwise it is named, and waits.
  void check_collectives();
  void signal_all(int sig);
  /// Sends `sig` to every process, then SIGKILL after the grace period.
  void stop_all(int sig);
  size_t running() const;

  const LaunchOptions& options_;
  const int port_, restart_;
  const sigset_t& original_;
  GroupWatch* watch_;
  const bool relay_;
  OutputRelay relay_output_;
  std::vector<int> ranks_;
  FlightWatch flight_;  // before the processes start: they inherit its folder
  std::vector<Child> children_;
  std::map<int, std::string> exited_;
  GroupResult group_;
  bool stopping_ = false;
  Clock::time_point kill_at_;
};

/// Starts this machine's processes once and watches them until all have ended.
inline GroupResult run_group(const LaunchOptions& options, int port, int restart, int signal_fd,
                             const sigset_t& original, GroupWatch* watch = nullptr) {
  return LocalGroup(options, port, restart, original, watch).run(signal_fd);
}

}  // namespace launcher
}  // namespace accel
