#include "local_group.h"

#include "child_environment.h"
#include "launch_output.h"

#include "accel_common/contract.h"

#include <fcntl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace accel {
namespace launcher {
namespace {

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string signal_text(int sig) {
  const char* name = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + " (SIG" + (name ? name : "?") + ")";
}

/// Ended by SIGABRT: what a process does on an error it does not handle (c10d's, when a peer's
/// connection resets), so more often a consequence than a cause.
bool aborted(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT; }

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by " + signal_text(WTERMSIG(status));
  if (WIFSTOPPED(status)) return "was stopped by " + signal_text(WSTOPSIG(status));
  return "ended with status " + std::to_string(status);
}

/// The ranks of this machine's processes.
std::vector<int> ranks_of(const LaunchOptions& o) {
  const int per_machine = o.num_processes / o.num_machines;
  std::vector<int> ranks;
  for (int local = 0; local < per_machine; ++local)
    ranks.push_back(o.machine_rank * per_machine + local);
  return ranks;
}

}  // namespace

LocalGroup::LocalGroup(const LaunchOptions& options, int port, int restart,
                       const sigset_t& original, GroupWatch* watch)
    : options_(options),
      port_(port),
      restart_(restart),
      original_(original),
      watch_(watch),
      relay_(options.rank_prefix || options.tee_dir.has_value()),
      relay_output_(options.rank_prefix, options.tee_dir),
      ranks_(ranks_of(options)),
      flight_(ranks_) {}

GroupResult LocalGroup::run(int signal_fd) {
  if (!spawn()) return group_;
  while (running() > 0) poll_once(signal_fd);
  relay_output_.drain(std::chrono::milliseconds(500));
  return group_;
}

bool LocalGroup::spawn() {
  for (size_t local = 0; local < ranks_.size(); ++local) {
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (relay_ && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
      say("pipe failed: ", std::strerror(errno));
      signal_all(SIGKILL);
      group_.code = 1;
      group_.interrupted = true;  // nothing a restart would fix
      return false;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      say("fork failed: ", std::strerror(errno));
      signal_all(SIGKILL);
      group_.code = 1;
      group_.interrupted = true;
      return false;
    }
    if (pid == 0) {
      exec_child(options_, static_cast<int>(local), port_, restart_, original_, out_pipe[1],
                 err_pipe[1]);
    }
    ::setpgid(pid, pid);  // also here, so no signal can race the child's own setpgid
    if (relay_) {
      ::close(out_pipe[1]);
      ::close(err_pipe[1]);
      relay_output_.add(ranks_[local], out_pipe[0], STDOUT_FILENO);
      relay_output_.add(ranks_[local], err_pipe[0], STDERR_FILENO);
    }
    children_.push_back({ranks_[local], pid, true});
  }
  return true;
}

void LocalGroup::poll_once(int signal_fd) {
  const int poll_ms = std::max(1, static_cast<int>(options_.monitor_interval * 1000));
  std::vector<pollfd> fds{{signal_fd, POLLIN, 0}};
  relay_output_.append_poll_fds(&fds);
  const size_t watched = fds.size();
  if (watch_ != nullptr) watch_->add_poll_fds(&fds);
  ::poll(fds.data(), fds.size(), poll_ms);
  relay_output_.read_ready(fds, 1);
  if (watch_ != nullptr && group_.code == 0 && !group_.stopped) {
    if (auto reason = watch_->check(fds, watched)) {
      relay_output_.flush();
      say(*reason, "; stopping this machine's processes");
      group_.stopped = true;
      group_.cause = *reason;
      stop_all(SIGTERM);
    }
  }
  handle_signals(signal_fd);
  reap();
  check_collectives();
  if (stopping_ && running() > 0 && Clock::now() >= kill_at_) {
    say("processes still running after ", options_.grace_period, " s; sending SIGKILL");
    signal_all(SIGKILL);
    kill_at_ = Clock::time_point::max();
  }
}

void LocalGroup::handle_signals(int signal_fd) {
  signalfd_siginfo info{};
  while (::read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) continue;
    relay_output_.flush();
    say("received SIG", sigabbrev_np(sig), ", stopping all processes");
    group_.interrupted = true;
    if (group_.code == 0) {
      group_.code = 128 + sig;
      group_.cause = "machine " + std::to_string(options_.machine_rank) +
                     "'s launcher received SIG" + sigabbrev_np(sig);
      if (watch_ != nullptr) watch_->failed(group_);
    }
    stop_all(sig);
  }
}

void LocalGroup::reap() {
  int status = 0;
  pid_t pid;
  // Every process that has ended by now is reaped before one is named the group's failure: a
  // process killed from outside (SIGKILL, a crash) is the cause, and a peer that aborted on the
  // reset connections it left is its consequence, even when that peer is reaped first.
  struct Ended {
    const Child* child;
    int status, code;
  };
  std::vector<Ended> failed;
  // WUNTRACED: a process stopped by a signal (SIGSTOP, a debugger's) holds up every collective
  // of the job; it counts as failed, and its group is stopped.
  while ((pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED)) > 0) {
    for (auto& c : children_) {
      if (c.pid != pid || !c.running) continue;
      if (WIFSTOPPED(status)) {
        failed.push_back({&c, status, 128 + WSTOPSIG(status)});
        ::kill(-c.pid, SIGKILL);  // it cannot act on SIGTERM while stopped
        continue;
      }
      c.running = false;
      exited_[c.rank] = describe(status);
      // The process-group leader is gone; its children may remain.
      ::kill(-c.pid, SIGKILL);
      const int code = exit_code_of(status);
      if (code != 0) failed.push_back({&c, status, code});
    }
  }
  if (failed.empty()) return;
  auto cause =
      std::find_if(failed.begin(), failed.end(), [](const Ended& e) { return !aborted(e.status); });
  if (cause == failed.end()) cause = failed.begin();
  fail(*cause->child, cause->status, cause->code);
}

void LocalGroup::fail(const Child& c, int status, int code) {
  if (group_.code != 0 || group_.stopped) return;
  group_.code = code;
  group_.cause =
      "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") " + describe(status);
  relay_output_.flush();
  say(group_.cause, "; stopping the other processes");
  // Where the others wait, and whether two of them were in different collectives.
  std::vector<int> still_running;
  for (const auto& other : children_)
    if (other.running) still_running.push_back(other.rank);
  if (auto verdict =
          flight_.judge_when_written(exited_, still_running, std::chrono::milliseconds(1200));
      verdict && (verdict->waiting || verdict->failed)) {
    say("the last collectives of each process:\n", verdict->table);
    group_.consequence = verdict->failed_ranks.count(c.rank) != 0;
    if (verdict->mismatched) {
      group_.code = contract::kHangExitCode;
      group_.cause += " (the processes had entered different collectives)";
    }
  }
  stop_all(SIGTERM);
  if (watch_ != nullptr) watch_->failed(group_);
}

void LocalGroup::check_collectives() {
  if (group_.code != 0 || group_.stopped || stopping_) return;
  auto verdict = flight_.poll(exited_);
  if (!verdict || !verdict->waiting) return;
  relay_output_.flush();
  if (!verdict->proven) {
    say("a collective has waited longer than ", contract::kHangWatchdog,
        "; nothing proves it stuck yet, so it waits on (until ", contract::kTimeout, "):\n",
        verdict->table);
    return;
  }
  group_.code = contract::kHangExitCode;
  group_.cause = "the processes wait in collectives that can never complete";
  say(group_.cause, ":\n", verdict->table, "accel launch: stopping the processes (exit code ",
      contract::kHangExitCode, ")");
  stop_all(SIGTERM);
  if (watch_ != nullptr) watch_->failed(group_);
}

void LocalGroup::signal_all(int sig) {
  for (const auto& c : children_) {
    if (c.running) ::kill(-c.pid, sig);
  }
}

void LocalGroup::stop_all(int sig) {
  if (stopping_) return;
  stopping_ = true;
  signal_all(sig);
  signal_all(SIGCONT);  // a stopped process acts on SIGTERM only once it runs again
  kill_at_ =
      Clock::now() + std::chrono::milliseconds(static_cast<int>(options_.grace_period * 1000));
}

size_t LocalGroup::running() const {
  size_t n = 0;
  for (const auto& c : children_) n += c.running ? 1 : 0;
  return n;
}

}  // namespace launcher
}  // namespace accel
