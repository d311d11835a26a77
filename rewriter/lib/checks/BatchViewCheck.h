//===- BatchViewCheck.h - accel-migrate 'batch-view' -------------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// `.view({batch_size, ...})` / `.reshape(...)` of a prepared loader's batch with a fixed first
/// dimension: each process's share of a batch can be smaller than the configured size, and the
/// view would then throw or mis-shape it. The size becomes the batch's own, `x.size(0)` (the
/// same on one process, where every batch had batch_size samples); reported where the batch
/// cannot be named twice.
class BatchViewCheck : public MigrationCheck {
public:
  explicit BatchViewCheck(MigrationContext &Context) : MigrationCheck("batch-view", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
};

} // namespace accel::migrate
