#include <accel/state.h>

#include "distributed/environment.h"

namespace accel {

const ProcessState& state() {
  // The environment of a process does not change under it: read once (thread-safe static).
  static const ProcessState process = [] {
    const detail::ProcessIdentity identity =
        detail::detect_process_identity(detail::process_environment());
    ProcessState s;
    s.process_index_ = identity.rank;
    s.local_process_index_ = identity.local_rank;
    s.num_processes_ = identity.world_size;
    return s;
  }();
  return process;
}

}  // namespace accel
