//===- DivergentCollectiveCheck.h - accel-migrate 'divergent-collective' ------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// Refuses a program in which some processes reach a collective that others skip: a call that
/// communicates with every process (save_state, gather_for_metrics, wait_for_everyone, a prepared
/// model's forward, backward, ... or a function that reaches one) under a condition that differs
/// between processes (is_main_process(), a value computed per process and never reduced), after
/// an early exit only some processes take, or inside on_main_process(...). Such a program does
/// not fail: it hangs until the backend's timeout. Reported as an error, so that --check fails.
class DivergentCollectiveCheck : public MigrationCheck {
public:
  explicit DivergentCollectiveCheck(MigrationContext &Context)
      : MigrationCheck("divergent-collective", Context) {}
  void finish() override;
};

} // namespace accel::migrate
