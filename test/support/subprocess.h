#pragma once

// Runs a command as a real child process, capturing its combined output, with a time limit.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace accel_test {

struct RunResult {
  int exit_code = -1;  // 128 + signal for a signal
  std::string output;
  double seconds = 0;
  bool timed_out = false;
};

/// Runs `argv` with `env` added to this process's environment. `while_running` is called once,
/// with the child's pid, after `call_after_seconds`.
inline RunResult run(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env = {},
                     double timeout_seconds = 60,
                     std::function<void(pid_t)> while_running = nullptr,
                     double call_after_seconds = 0) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {};
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    for (const auto& kv : env) ::setenv(kv.first.c_str(), kv.second.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::_Exit(127);
  }
  ::close(pipe_fds[1]);
  ::fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  RunResult result;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  bool called = false;
  int status = 0;
  bool exited = false;
  while (true) {
    pollfd fd{pipe_fds[0], POLLIN, 0};
    ::poll(&fd, 1, 50);
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0) result.output.append(buffer, n);
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      result.seconds = elapsed();
    }
    if (exited && n == 0) break;  // exited and the pipe is drained and closed
    if (exited && elapsed() > result.seconds + 5) break;  // a grandchild holds the pipe open
    if (!called && while_running && elapsed() >= call_after_seconds) {
      called = true;
      while_running(pid);
    }
    if (!exited && elapsed() > timeout_seconds) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
    }
  }
  ::close(pipe_fds[0]);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace accel_test
