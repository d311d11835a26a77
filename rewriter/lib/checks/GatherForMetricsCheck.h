//===- GatherForMetricsCheck.h - accel-migrate 'gather-for-metrics' ---------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// In evaluation loops (over a prepared loader, without backward), the batch tensors
/// that feed a metric accumulation (`correct += pred.eq(target).sum()...`,
/// `total += target.size(0)`) go through `accelerator.gather_for_metrics` first, so every
/// process counts the whole evaluation set once.
class GatherForMetricsCheck : public MigrationCheck {
public:
  explicit GatherForMetricsCheck(MigrationContext &Context) : MigrationCheck("gather-for-metrics", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
};

} // namespace accel::migrate
