#include "linked_launch.h"

#include "launch_output.h"
#include "local_group.h"
#include "machine_link.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

namespace accel {
namespace launcher {
namespace {

/// How long the launchers wait for each other: to join, and for a group to report its end.
constexpr std::chrono::seconds kJoinTimeout{300};
constexpr std::chrono::seconds kReportTimeout{60};

/// A failure of some machine's group, as the coordinator records it.
struct MachineFailure {
  int code = 1;
  bool restartable = true;
  std::string cause;         // "machine 1: rank 3 (pid 42) was killed by signal 9 (SIGKILL)"
  bool consequence = false;  // see GroupResult::consequence
};

/// Machine 0's side: records the other machines' reports during a round.
class CoordinatorWatch final : public GroupWatch {
 public:
  CoordinatorWatch(MachineLink& link, int round, int machines)
      : link_(link), round_(round), machines_(machines) {}

  void add_poll_fds(std::vector<pollfd>* fds) override { link_.add_poll_fds(fds); }
  std::optional<std::string> check(const std::vector<pollfd>& fds, size_t first) override {
    for (const auto& message : link_.read_ready(fds, first)) handle(message);
    if (failure_) return failure_->cause;
    return std::nullopt;
  }
  void failed(const GroupResult& group) override {
    note({group.code, !group.interrupted, "machine 0: " + group.cause, group.consequence});
  }
  /// Waits until every other machine's group has ended.
  void wait_for_the_others() {
    while (static_cast<int>(ended_.size()) < machines_ - 1) {
      auto message = link_.next(kReportTimeout);
      if (!message) {
        note({1, false,
              "the other machines' launchers did not report within " +
                  std::to_string(kReportTimeout.count()) + " s"});
        return;
      }
      handle(*message);
    }
  }
  const std::optional<MachineFailure>& failure() const { return failure_; }

 private:
  void handle(const LinkMessage& message) {
    const std::string machine = "machine " + std::to_string(message.machine);
    if (message.lost) {
      ended_.insert(message.machine);
      note({1, false, "lost contact with " + machine + "'s launcher"});
      return;
    }
    if (message.words.empty() || std::atoi(message.words[0].c_str()) != round_) return;
    if (message.verb == "failed" && message.words.size() >= 4) {
      note({std::atoi(message.words[1].c_str()), message.words[2] == "1",
            machine + ": " + message.rest(4), message.words[3] == "1"});
    } else if (message.verb == "ended") {
      ended_.insert(message.machine);
    }
  }
  /// The round's failure is the first one reported, unless it may be the consequence of another
  /// reported after it: a killed process on machine 1 resets machine 0's connections at once,
  /// and machine 0's own process may die of that (its record says so, or, when that record came
  /// too late, it aborted: c10d's error unhandled) before machine 1's report arrives.
  void note(MachineFailure failure) {
    if (!failure_ || (may_be_consequence(*failure_) && !may_be_consequence(failure))) {
      failure_ = std::move(failure);
    }
    if (!stop_sent_) {
      link_.send("stop " + std::to_string(round_));
      stop_sent_ = true;
    }
  }

  static bool may_be_consequence(const MachineFailure& f) {
    return f.consequence || f.code == 128 + SIGABRT;
  }

  MachineLink& link_;
  int round_, machines_;
  std::optional<MachineFailure> failure_;
  std::set<int> ended_;
  bool stop_sent_ = false;
};

/// Another machine's side: reports its group's failure at once, stops when machine 0 says.
class FollowerWatch final : public GroupWatch {
 public:
  FollowerWatch(MachineLink& link, int round) : link_(link), round_(round) {}

  void add_poll_fds(std::vector<pollfd>* fds) override { link_.add_poll_fds(fds); }
  std::optional<std::string> check(const std::vector<pollfd>& fds, size_t first) override {
    for (const auto& message : link_.read_ready(fds, first)) {
      if (message.lost) {
        verdict_ = message;
        return std::string("lost contact with machine 0's launcher");
      }
      if (message.verb == "give-up") verdict_ = message;
      if (message.verb == "give-up" || message.verb == "stop") {
        return std::string("machine 0's launcher stopped the job: another machine's group failed");
      }
    }
    return std::nullopt;
  }
  void failed(const GroupResult& group) override {
    link_.send("failed " + std::to_string(round_) + " " + std::to_string(group.code) + " " +
               (group.interrupted ? "0 " : "1 ") + (group.consequence ? "1 " : "0 ") + group.cause);
  }
  /// A give-up or lost connection that arrived while the group ran.
  const std::optional<LinkMessage>& verdict() const { return verdict_; }

 private:
  MachineLink& link_;
  int round_;
  std::optional<LinkMessage> verdict_;
};

int coordinate(const LaunchOptions& o, MachineLink& link, int signal_fd, const sigset_t& original) {
  std::string last_cause;
  for (int round = 0;; ++round) {
    // A fresh rendezvous port each round: a process of the round being stopped cannot reach it.
    const int port = find_free_port();
    link.send("start " + std::to_string(round) + " " + std::to_string(port) + " " + last_cause);
    CoordinatorWatch watch(link, round, o.num_machines);
    const auto group = run_group(o, port, round, signal_fd, original, &watch);
    if (group.code != 0 && !group.stopped && !watch.failure()) watch.failed(group);
    watch.wait_for_the_others();
    const auto& failure = watch.failure();
    if (!failure) {
      link.send("done");
      return 0;
    }
    if (failure->restartable && round < o.max_restarts) {
      last_cause = failure->cause;
      say("restarting the group on every machine (restart ", round + 1, " of ", o.max_restarts,
          ") after ", failure->cause);
      continue;
    }
    const std::string verdict = failure->restartable
                                    ? "giving up after " + std::to_string(o.max_restarts) +
                                          " restart" + (o.max_restarts == 1 ? "" : "s") +
                                          "; the last failure: " + failure->cause
                                    : "the job ends: " + failure->cause;
    link.send("give-up " + std::to_string(failure->code) + " " + verdict);
    say(verdict);
    return failure->code;
  }
}

/// The launcher's exit for a give-up or a lost connection to machine 0.
int end_as_told(const LinkMessage& message) {
  if (message.lost) {
    say("lost contact with machine 0's launcher; the job ends");
    return 1;
  }
  const int code = message.words.empty() ? 1 : std::atoi(message.words[0].c_str());
  say(message.rest(1));
  return code == 0 ? 1 : code;
}

int follow(const LaunchOptions& o, MachineLink& link, int signal_fd, const sigset_t& original) {
  for (;;) {
    // Waits for machine 0's word, still answering SIGINT and SIGTERM.
    std::optional<LinkMessage> message;
    while (!message) {
      signalfd_siginfo info{};
      while (::read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        const int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return 128 + sig;
      }
      message = link.next(std::chrono::milliseconds(200));
    }
    if (message->lost || message->verb == "give-up") return end_as_told(*message);
    if (message->verb == "done") return 0;
    if (message->verb != "start" || message->words.size() < 2) continue;
    const int round = std::atoi(message->words[0].c_str());
    const int port = std::atoi(message->words[1].c_str());
    if (round > 0) {
      say("restarting the group on every machine (restart ", round, " of ", o.max_restarts,
          ") after ", message->rest(2));
    }
    FollowerWatch watch(link, round);
    const auto group = run_group(o, port, round, signal_fd, original, &watch);
    link.send("ended " + std::to_string(round) + " " + std::to_string(group.code));
    if (watch.verdict()) return end_as_told(*watch.verdict());
  }
}

}  // namespace

/// A job on several machines whose groups restart: the launchers meet first, then run each round
/// together.
int launch_linked(const LaunchOptions& o, int signal_fd, const sigset_t& original) {
  std::unique_ptr<MachineLink> link;
  try {
    link = std::make_unique<MachineLink>(o, kJoinTimeout);
  } catch (const std::runtime_error& e) {
    say(e.what());
    return 1;
  }
  return link->coordinator() ? coordinate(o, *link, signal_fd, original)
                             : follow(o, *link, signal_fd, original);
}

}  // namespace launcher
}  // namespace accel
