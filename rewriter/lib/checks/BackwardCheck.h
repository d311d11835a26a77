//===- BackwardCheck.h - accel-migrate 'backward' ---------------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// `loss.backward(args)` becomes `accelerator.backward(loss, args)`; custom autograd
/// functions are reported (their backward runs as written).
class BackwardCheck : public MigrationCheck {
public:
  explicit BackwardCheck(MigrationContext &Context) : MigrationCheck("backward", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
};

} // namespace accel::migrate
