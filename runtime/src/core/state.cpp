#include <accel/state.h>

#include "distributed/environment.h"

namespace accel {

const ProcessState& state() {
  // The environment of a process does not change under it: read once (thread-safe static).
  static const ProcessState process = [] {
    const distributed::ProcessIdentity identity =
        distributed::detect_process_identity(distributed::process_environment());
    ProcessState s;
    s.process_index_ = identity.rank;
    s.local_process_index_ = identity.local_rank;
    s.num_processes_ = identity.world_size;
    return s;
  }();
  return process;
}

}  // namespace accel
