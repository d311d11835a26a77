#pragma once
// The process's live Accelerators, for Accelerator::current(): each registers once constructed
// and leaves when destroyed. Private to core.

#include <accel/accelerator.h>

namespace accel::core {

/// Called at the end of Accelerator's constructor, once it is complete.
void register_accelerator(Accelerator& accelerator, detail::SourcePlace created_at);
/// Called first in Accelerator's destructor.
void unregister_accelerator(const Accelerator& accelerator);

}  // namespace accel::core
