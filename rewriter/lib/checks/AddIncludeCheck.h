//===- AddIncludeCheck.h - accel-migrate 'add-include' ----------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// Adds `#include <accel/accel.h>` next to the torch include of each file that now uses
/// the accelerator.
class AddIncludeCheck : public MigrationCheck {
public:
  explicit AddIncludeCheck(MigrationContext &Context) : MigrationCheck("add-include", Context) {}
  void finish() override;
};

} // namespace accel::migrate
