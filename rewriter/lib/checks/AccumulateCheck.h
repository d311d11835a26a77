//===- AccumulateCheck.h - accel-migrate 'accumulate' -----------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// A loop over a prepared data loader that calls backward gets
/// `auto step = accelerator.accumulate(models);` as its first statement; backward called in any
/// other loop is reported, since it cannot be proven to be the training loop.
class AccumulateCheck : public MigrationCheck {
public:
  explicit AccumulateCheck(MigrationContext &Context) : MigrationCheck("accumulate", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
};

} // namespace accel::migrate
