#include "launch.h"

#include "launch_output.h"
#include "linked_launch.h"
#include "local_group.h"

#include "accel_common/contract.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <cstdio>
#include <cstdlib>
#include <random>

namespace accel {
namespace launcher {

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
  if (o.parallelism) {
    const auto& m = *o.parallelism;
    if (m.dp_replicate < 1 || m.dp_shard < 1 || m.tp < 1 || m.cp < 1 || m.pp < 1) {
      return "--parallelism_config_*_size must be at least 1 (got dp_replicate " +
             std::to_string(m.dp_replicate) + ", dp_shard " + std::to_string(m.dp_shard) + ", tp " +
             std::to_string(m.tp) + ", cp " + std::to_string(m.cp) + ", pp " +
             std::to_string(m.pp) + ")";
    }
    // Accelerate's rule: a mesh left all 1 is plain data parallelism over every process.
    if (m.product() != 1 && m.product() != o.num_processes) {
      return "the parallelism config's sizes (dp_replicate " + std::to_string(m.dp_replicate) +
             " x dp_shard " + std::to_string(m.dp_shard) + " x tp " + std::to_string(m.tp) +
             " x cp " + std::to_string(m.cp) +
             (m.pp > 1 ? " x pp " + std::to_string(m.pp) : std::string()) + " = " +
             std::to_string(m.product()) + ") must multiply to --num_processes (" +
             std::to_string(o.num_processes) + ")";
    }
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
