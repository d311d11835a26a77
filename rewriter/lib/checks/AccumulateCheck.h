//===- AccumulateCheck.h - accel-migrate 'accumulate' -----------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

#include <string>

namespace accel::migrate {

/// A loop over a prepared data loader that calls backward gets
/// `auto step = accelerator.accumulate(models);` as its first statement; backward called in any
/// other loop is reported, since it cannot be proven to be the training loop.
class AccumulateCheck : public MigrationCheck {
public:
  explicit AccumulateCheck(MigrationContext &Context) : MigrationCheck("accumulate", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;

private:
  /// backward() in a loop that does not iterate a prepared loader: reported, with what each
  /// process trains on.
  void reportUnprovenLoop(const clang::Stmt *Loop);
  /// What the report of an unproven loop adds about the data each process reads.
  std::string unprovenLoopData(const clang::Stmt *Loop);
  /// The training loop over a prepared loader: its accumulate scope inserted.
  void migrateTrainingLoop(const clang::CXXForRangeStmt *Loop);
  /// The prepared models the loop's body uses, as accumulate()'s arguments; the others reported.
  std::string modelsToAccumulate(const clang::CXXForRangeStmt *Loop,
                                 const clang::CompoundStmt *Body);
};

} // namespace accel::migrate
