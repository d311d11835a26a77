//===- BatchViewCheck.h - accel-migrate 'batch-view' -------------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// Reports `.view({batch_size, ...})` / `.reshape(...)` of a prepared loader's batch with a
/// fixed first dimension: each process's share of a batch, and the last batch, can be smaller
/// than the configured size, and the view then throws. `-1` or `x.size(0)` is what works.
class BatchViewCheck : public MigrationCheck {
public:
  explicit BatchViewCheck(MigrationContext &Context) : MigrationCheck("batch-view", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
};

} // namespace accel::migrate
