#pragma once

// Names the accel call a collective belongs to, for the flight recorder: a scope on the issuing
// thread ("save_state", "FULL_SHARD parameter gather", "gradient reduce-scatter of unit" 3).
// Scopes nest ("save_state > gather_object"); each counts the collectives issued inside it.
// Costs a few stores on a thread-local array: no allocation, no lock.

#include "accel_common/accelerator_methods.h"

#include <cstdint>
#include <string>

/// Opens the label of an Accelerator call for the rest of the scope: `name` (a string literal)
/// must be one of its public methods in accel_common/accelerator_methods.h, the table
/// accel-migrate reads too (checked when compiled).
#define ACCEL_METHOD_LABEL(name)                                \
  static_assert(::accel::contract::is_accelerator_method(name), \
                "ACCEL_METHOD_LABEL(" name                      \
                "): not a public Accelerator method listed in " \
                "accel_common/accelerator_methods.h");          \
  ::accel::util::CollectiveLabel collective_label(name)

namespace accel {
namespace util {

class CollectiveLabel {
 public:
  /// `call` must outlive the scope (a string literal). `index` < 0: none.
  explicit CollectiveLabel(const char* call, int64_t index = -1);
  ~CollectiveLabel();
  CollectiveLabel(const CollectiveLabel&) = delete;
  CollectiveLabel& operator=(const CollectiveLabel&) = delete;
};

/// What issued the collective `op` now on this thread: the open scopes, outermost first, with
/// this collective's number inside the innermost ("backward, gradient bucket 2"). Without a
/// scope on this thread, the outermost scope open on the process's first labelled thread, marked
/// as seen from another thread (autograd's device threads run the Reducer's hooks).
std::string describe_collective_call(const char* op);

}  // namespace util
}  // namespace accel
