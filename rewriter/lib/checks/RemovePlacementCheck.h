//===- RemovePlacementCheck.h - accel-migrate 'remove-placement' ------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// Drops `.to(device)` / `.cuda()` where the runtime now places things: on prepared
/// models and on the batches of prepared data loaders. A dtype given with the device is kept;
/// placements of tensors the program makes itself are left (their device is the accelerator's).
class RemovePlacementCheck : public MigrationCheck {
public:
  explicit RemovePlacementCheck(MigrationContext &Context)
      : MigrationCheck("remove-placement", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
};

} // namespace accel::migrate
