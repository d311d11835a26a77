#pragma once

// A launched process's side, between fork and exec: the torchrun variables (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, ...), the ACCEL_* variables of the launch's options, torchelastic's
// restart count, its own process group and the signal mask the launcher started with; then the
// program.

#include "launch.h"

#include <signal.h>

namespace accel {
namespace launcher {

/// Never returns: execs `o.command`, or exits 127 saying why it could not.
[[noreturn]] void exec_child(const LaunchOptions& o, int local_rank, int port, int restart,
                             const sigset_t& original_mask, int stdout_fd, int stderr_fd);

}  // namespace launcher
}  // namespace accel
