#include "launch.h"

#include "flight_table.h"
#include "machine_link.h"
#include "output_relay.h"

#include "accel_common/contract.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>

namespace accel {
namespace launcher {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = true;
};

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string signal_text(int sig) {
  const char* name = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + " (SIG" + (name ? name : "?") + ")";
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by " + signal_text(WTERMSIG(status));
  if (WIFSTOPPED(status)) return "was stopped by " + signal_text(WSTOPSIG(status));
  return "ended with status " + std::to_string(status);
}

/// Writes one line of the launcher's to stderr in one write, so that the processes' own output on
/// the same stream never splits it.
template <typename... Parts>
void say(const Parts&... parts) {
  std::ostringstream line;
  line << "accel launch: ";
  (line << ... << parts);
  line << '\n';
  const std::string text = line.str();
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, text.data(), text.size());
}

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

void set_env(const std::string& name, const std::string& value) {
  ::setenv(name.c_str(), value.c_str(), 1);
}

// In the child, between fork and exec: the torchrun variables, then the program.
[[noreturn]] void exec_child(const LaunchOptions& o, int local_rank, int port, int restart,
                             const sigset_t& original_mask, int stdout_fd, int stderr_fd) {
  if (stdout_fd >= 0) ::dup2(stdout_fd, STDOUT_FILENO);
  if (stderr_fd >= 0) ::dup2(stderr_fd, STDERR_FILENO);
  const int world = o.num_processes;
  const int per_machine = o.num_processes / o.num_machines;
  set_env("RANK", std::to_string(o.machine_rank * per_machine + local_rank));
  set_env("WORLD_SIZE", std::to_string(world));
  set_env("LOCAL_RANK", std::to_string(local_rank));
  set_env("LOCAL_WORLD_SIZE", std::to_string(per_machine));
  set_env("GROUP_RANK", std::to_string(o.machine_rank));
  set_env("MASTER_ADDR", o.main_process_ip);
  set_env("MASTER_PORT", std::to_string(port));
  // As torchrun: one thread per process unless the user chose, so N processes do not fight
  // over the cores.
  if (world > 1) ::setenv("OMP_NUM_THREADS", "1", 0);
  if (o.mixed_precision) set_env(contract::kMixedPrecision, *o.mixed_precision);
  if (o.gradient_accumulation_steps) {
    set_env(contract::kGradientAccumulationSteps, std::to_string(*o.gradient_accumulation_steps));
  }
  if (o.cpu) set_env(contract::kUseCpu, "1");
  if (o.sharding_strategy) set_env(contract::kShardingStrategy, *o.sharding_strategy);
  if (o.classes_to_wrap) set_env(contract::kFsdpClassesToWrap, *o.classes_to_wrap);
  if (o.min_num_params) set_env(contract::kFsdpMinNumParams, std::to_string(*o.min_num_params));
  if (o.state_dict_type) set_env(contract::kFsdpStateDictType, *o.state_dict_type);
  if (o.offload_params) set_env(contract::kFsdpOffloadParams, *o.offload_params ? "true" : "false");
  if (o.activation_checkpointing) {
    set_env(contract::kFsdpActivationCheckpointing, *o.activation_checkpointing ? "true" : "false");
  }
  if (o.forward_prefetch) {
    set_env(contract::kFsdpForwardPrefetch, *o.forward_prefetch ? "true" : "false");
  }
  if (o.backward_prefetch) set_env(contract::kFsdpBackwardPrefetch, *o.backward_prefetch);
  if (o.find_unused_parameters) {
    set_env(contract::kDdpFindUnusedParameters, *o.find_unused_parameters ? "true" : "false");
  }
  if (o.static_graph) set_env(contract::kDdpStaticGraph, *o.static_graph ? "true" : "false");
  if (o.comm_hook) set_env(contract::kDdpCommHook, *o.comm_hook);
  if (o.log_with) set_env(contract::kLogWith, *o.log_with);
  // torchrun's names too, for programs written against it.
  set_env(contract::kRestartCount, std::to_string(restart));
  set_env("TORCHELASTIC_RESTART_COUNT", std::to_string(restart));
  set_env("TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts));
  if (restart > 0) set_env(contract::kResume, "auto");
  if (o.gpu_ids && *o.gpu_ids != "all") set_env("CUDA_VISIBLE_DEVICES", *o.gpu_ids);
  // Its own process group, so the launcher alone decides how a terminal's Ctrl-C reaches it.
  ::setpgid(0, 0);
  ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  std::vector<char*> argv;
  for (const auto& arg : o.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "accel launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  std::_Exit(127);
}

}  // namespace

std::optional<std::string> validate(const LaunchOptions& o) {
  if (o.command.empty()) return "no program to launch (usage: accel launch [options] PROGRAM ...)";
  if (o.num_processes < 1) {
    return "--num_processes must be at least 1 (got " + std::to_string(o.num_processes) + ")";
  }
  if (o.num_machines < 1) {
    return "--num_machines must be at least 1 (got " + std::to_string(o.num_machines) + ")";
  }
  if (o.num_processes % o.num_machines != 0) {
    return "--num_processes (" + std::to_string(o.num_processes) +
           ", the whole job) must be a multiple of --num_machines (" +
           std::to_string(o.num_machines) + ")";
  }
  if (o.machine_rank < 0 || o.machine_rank >= o.num_machines) {
    return "--machine_rank must be in [0, " + std::to_string(o.num_machines) + ") (got " +
           std::to_string(o.machine_rank) + ")";
  }
  if (o.main_process_port && (*o.main_process_port < 1 || *o.main_process_port > 65535)) {
    return "--main_process_port must be in 1..65535 (got " + std::to_string(*o.main_process_port) +
           ")";
  }
  if (o.gradient_accumulation_steps && *o.gradient_accumulation_steps < 1) {
    return "--gradient_accumulation_steps must be at least 1";
  }
  if (o.mixed_precision) {
    const auto& mp = *o.mixed_precision;
    if (!contract::is_one_of(mp, contract::mixed_precision_choices())) {
      return "--mixed_precision must be one of " +
             contract::join(contract::mixed_precision_choices()) + " (got '" + mp + "')";
    }
  }
  return std::nullopt;
}

namespace {

// True when a listening socket can bind `port` for this address family now.
bool can_bind(int family, int port) {
  const int fd = ::socket(family, SOCK_STREAM, 0);
  if (fd < 0) return family == AF_INET6;  // no IPv6 on this machine: nothing to collide with
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  bool bound = false;
  if (family == AF_INET) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  } else {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ::close(fd);
  return bound;
}

}  // namespace

bool port_is_free(int port) { return can_bind(AF_INET, port) && can_bind(AF_INET6, port); }

int find_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t length = sizeof(addr);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

namespace {

// Starts this machine's processes once and watches them until all have ended.
GroupResult run_group(const LaunchOptions& o, int port, int restart, int signal_fd,
                      const sigset_t& original, GroupWatch* watch = nullptr) {
  GroupResult group;
  int& result = group.code;
  const bool relay = o.rank_prefix || o.tee_dir.has_value();
  OutputRelay relay_output(o.rank_prefix, o.tee_dir);
  std::vector<Child> children;
  const int per_machine = o.num_processes / o.num_machines;
  std::vector<int> ranks;
  for (int local = 0; local < per_machine; ++local)
    ranks.push_back(o.machine_rank * per_machine + local);
  FlightWatch flight(ranks);  // before the children start: they inherit its folder
  std::map<int, std::string> exited;
  for (int local = 0; local < per_machine; ++local) {
    const int rank = o.machine_rank * per_machine + local;
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (relay && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
      say("pipe failed: ", std::strerror(errno));
      for (auto& c : children) ::kill(-c.pid, SIGKILL);
      group.code = 1;
      group.interrupted = true;  // nothing a restart would fix
      return group;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      say("fork failed: ", std::strerror(errno));
      for (auto& c : children) ::kill(-c.pid, SIGKILL);
      group.code = 1;
      group.interrupted = true;
      return group;
    }
    if (pid == 0) exec_child(o, local, port, restart, original, out_pipe[1], err_pipe[1]);
    ::setpgid(pid, pid);  // also here, so no signal can race the child's own setpgid
    if (relay) {
      ::close(out_pipe[1]);
      ::close(err_pipe[1]);
      relay_output.add(rank, out_pipe[0], STDOUT_FILENO);
      relay_output.add(rank, err_pipe[0], STDERR_FILENO);
    }
    children.push_back({rank, pid, true});
  }

  bool stopping = false;
  Clock::time_point kill_at;
  auto signal_all = [&](int sig) {
    for (const auto& c : children) {
      if (c.running) ::kill(-c.pid, sig);
    }
  };
  auto stop_all = [&](int sig) {
    if (stopping) return;
    stopping = true;
    signal_all(sig);
    signal_all(SIGCONT);  // a stopped process acts on SIGTERM only once it runs again
    kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int>(o.grace_period * 1000));
  };
  auto fail = [&](const Child& c, int status, int code) {
    if (result != 0 || group.stopped) return;
    result = code;
    group.cause = "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") " +
                  describe(status);
    relay_output.flush();
    say(group.cause, "; stopping the other processes");
    // Where the others wait, and whether two of them were in different collectives.
    std::vector<int> still_running;
    for (const auto& other : children)
      if (other.running) still_running.push_back(other.rank);
    if (auto verdict =
            flight.judge_when_written(exited, still_running, std::chrono::milliseconds(1200));
        verdict && (verdict->waiting || verdict->failed)) {
      say("the last collectives of each process:\n", verdict->table);
      group.consequence = verdict->failed_ranks.count(c.rank) != 0;
      if (verdict->mismatched) {
        result = contract::kHangExitCode;
        group.cause += " (the processes had entered different collectives)";
      }
    }
    stop_all(SIGTERM);
    if (watch != nullptr) watch->failed(group);
  };
  // A process waits in a collective past the watchdog: stop the group when the records prove it
  // can never finish; otherwise say who it waits for, and let it wait.
  auto check_collectives = [&] {
    if (result != 0 || group.stopped || stopping) return;
    auto verdict = flight.poll(exited);
    if (!verdict || !verdict->waiting) return;
    relay_output.flush();
    if (!verdict->proven) {
      say("a collective has waited longer than ", contract::kHangWatchdog,
          "; nothing proves it stuck yet, so it waits on (until ", contract::kTimeout, "):\n",
          verdict->table);
      return;
    }
    result = contract::kHangExitCode;
    group.cause = "the processes wait in collectives that can never complete";
    say(group.cause, ":\n", verdict->table, "accel launch: stopping the processes (exit code ",
        contract::kHangExitCode, ")");
    stop_all(SIGTERM);
    if (watch != nullptr) watch->failed(group);
  };
  auto reap = [&] {
    int status = 0;
    pid_t pid;
    // WUNTRACED: a process stopped by a signal (SIGSTOP, a debugger's) holds up every
    // collective of the job; it counts as failed, and its group is stopped.
    while ((pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED)) > 0) {
      for (auto& c : children) {
        if (c.pid != pid || !c.running) continue;
        if (WIFSTOPPED(status)) {
          fail(c, status, 128 + WSTOPSIG(status));
          ::kill(-c.pid, SIGKILL);  // it cannot act on SIGTERM while stopped
          continue;
        }
        c.running = false;
        exited[c.rank] = describe(status);
        // The process-group leader is gone; its children may remain.
        ::kill(-c.pid, SIGKILL);
        const int code = exit_code_of(status);
        if (code != 0) fail(c, status, code);
      }
    }
  };
  auto running = [&] {
    size_t n = 0;
    for (const auto& c : children) n += c.running ? 1 : 0;
    return n;
  };

  const int poll_ms = std::max(1, static_cast<int>(o.monitor_interval * 1000));
  while (running() > 0) {
    std::vector<pollfd> fds{{signal_fd, POLLIN, 0}};
    relay_output.append_poll_fds(&fds);
    const size_t watched = fds.size();
    if (watch != nullptr) watch->add_poll_fds(&fds);
    ::poll(fds.data(), fds.size(), poll_ms);
    relay_output.read_ready(fds, 1);
    if (watch != nullptr && result == 0 && !group.stopped) {
      if (auto reason = watch->check(fds, watched)) {
        relay_output.flush();
        say(*reason, "; stopping this machine's processes");
        group.stopped = true;
        group.cause = *reason;
        stop_all(SIGTERM);
      }
    }
    signalfd_siginfo info{};
    while (::read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
        relay_output.flush();
        say("received SIG", sigabbrev_np(sig), ", stopping all processes");
        group.interrupted = true;
        if (result == 0) {
          result = 128 + sig;
          group.cause = "machine " + std::to_string(o.machine_rank) + "'s launcher received SIG" +
                        sigabbrev_np(sig);
          if (watch != nullptr) watch->failed(group);
        }
        stop_all(sig);
      }
    }
    reap();
    check_collectives();
    if (stopping && running() > 0 && Clock::now() >= kill_at) {
      say("processes still running after ", o.grace_period, " s; sending SIGKILL");
      signal_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
  }
  relay_output.drain(std::chrono::milliseconds(500));
  return group;
}

// ---- Several machines with restarts: the launchers decide together (see machine_link.h) -------

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
  /// The round's failure is the first one reported, unless it was the consequence of another
  /// (a process that died of a peer's reset connection) and the other is reported after it: a
  /// killed process on machine 1 resets machine 0's connections at once, and machine 0's own
  /// process may die of that before machine 1's report arrives.
  void note(MachineFailure failure) {
    if (!failure_ || (failure_->consequence && !failure.consequence)) {
      failure_ = std::move(failure);
    }
    if (!stop_sent_) {
      link_.send("stop " + std::to_string(round_));
      stop_sent_ = true;
    }
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

/// A job on several machines whose groups restart: the launchers meet first, then run each round
/// together.
int launch_linked(const LaunchOptions& o, int signal_fd, const sigset_t& original) {
  std::unique_ptr<MachineLink> link;
  try {
    link = std::make_unique<MachineLink>(o, kJoinTimeout);
  } catch (const std::runtime_error& e) {
    std::cerr << (std::string(e.what()) + "\n");
    return 1;
  }
  return link->coordinator() ? coordinate(o, *link, signal_fd, original)
                             : follow(o, *link, signal_fd, original);
}

}  // namespace

int launch(const LaunchOptions& o) {
  // Every start of the group, restarts included, sees the same run id (set in this process, so
  // that the children inherit it).
  if (std::getenv(contract::kRunId) == nullptr) {
    std::random_device source;
    char id[17];
    std::snprintf(id, sizeof id, "%08x%08x", source(), source());
    ::setenv(contract::kRunId, id, 1);
  }
  int port = 0;
  if (o.main_process_port) {
    port = *o.main_process_port;
    // Only the machine that hosts the rendezvous binds the port.
    if (o.machine_rank == 0 && !port_is_free(port)) {
      say("main process port ", port,
          " is already in use on this machine; choose another with "
          "--main_process_port, or leave it out to get a free one");
      return 2;
    }
  } else {
    port = o.num_machines == 1 ? find_free_port() : 29500;
  }

  // SIGCHLD, SIGINT, SIGTERM and SIGHUP arrive through a signalfd, polled with the children's
  // output pipes.
  sigset_t watched, original;
  sigemptyset(&watched);
  sigaddset(&watched, SIGCHLD);
  sigaddset(&watched, SIGINT);
  sigaddset(&watched, SIGTERM);
  sigaddset(&watched, SIGHUP);
  ::sigprocmask(SIG_BLOCK, &watched, &original);
  const int signal_fd = ::signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);

  if (o.num_machines > 1 && o.max_restarts > 0) {
    const int code = launch_linked(o, signal_fd, original);
    ::close(signal_fd);
    ::sigprocmask(SIG_SETMASK, &original, nullptr);
    return code;
  }
  GroupResult group;
  for (int restart = 0;; ++restart) {
    group = run_group(o, port, restart, signal_fd, original);
    if (group.code == 0 || group.interrupted) break;
    if (restart >= o.max_restarts) {
      if (o.max_restarts > 0) {
        say("giving up after ", o.max_restarts, " restart", (o.max_restarts == 1 ? "" : "s"),
            "; the last failure: ", group.cause);
      }
      break;
    }
    say("restarting the group (restart ", restart + 1, " of ", o.max_restarts, ") after ",
        group.cause);
    // The old rendezvous port may linger in TIME_WAIT; a one-machine job takes a fresh one.
    if (!o.main_process_port && o.num_machines == 1) port = find_free_port();
  }
  ::close(signal_fd);
  ::sigprocmask(SIG_SETMASK, &original, nullptr);
  return group.code;
}

}  // namespace launcher
}  // namespace accel
