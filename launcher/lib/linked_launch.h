#pragma once

// A job on several machines whose groups restart (--max_restarts with --num_machines > 1): the
// launchers meet over their link (machine_link.h), then run each round together. Machine 0's
// launcher coordinates: it starts every round, hears each machine's failure, names the cause
// (the first failure reported, unless it was the consequence of a later-reported one), and
// decides whether all restart or all give up; the others follow.

#include "launch.h"

#include <signal.h>

namespace accel {
namespace launcher {

/// Runs the job to its end on this machine and returns the launcher's exit code. SIGINT,
/// SIGTERM and SIGHUP arrive on `signal_fd`; `original` is the mask the processes get back.
int launch_linked(const LaunchOptions& options, int signal_fd, const sigset_t& original);

}  // namespace launcher
}  // namespace accel
