//===- AccumulateCheck.h - accel-migrate 'accumulate' -----------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

#include "llvm/ADT/MapVector.h"

#include <set>
#include <string>
#include <vector>

namespace accel::migrate {

/// A loop over a prepared data loader that calls backward gets
/// `auto step = accelerator.accumulate(models);` as its first statement; backward called in any
/// other loop is reported, since it cannot be proven to be the training loop.
class AccumulateCheck : public MigrationCheck {
public:
  explicit AccumulateCheck(MigrationContext &Context) : MigrationCheck("accumulate", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
  void finish() override;

private:
  /// A training loop seen once per instantiation of the template it is in (a function template
  /// called with two model types, a class template's member): one scope for all of them, over
  /// the models any instantiation showed prepared.
  struct TrainingLoop {
    const clang::CXXForRangeStmt *Loop = nullptr;
    std::string Accelerator;
    std::vector<std::string> Prepared, Unprepared;
    std::set<std::string> NotModels;
  };

  /// backward() in a loop that does not iterate a prepared loader: reported, with what each
  /// process trains on.
  void reportUnprovenLoop(const clang::Stmt *Loop);
  /// What the report of an unproven loop adds about the data each process reads.
  std::string unprovenLoopData(const clang::Stmt *Loop);
  /// The training loop over a prepared loader: noted for its accumulate scope.
  void noteTrainingLoop(const clang::CXXForRangeStmt *Loop);
  /// Its accumulate scope inserted, once for all instantiations.
  void migrateTrainingLoop(const TrainingLoop &Seen);
  /// The prepared models the loop's body uses, as accumulate()'s arguments; the others reported.
  std::string modelsToAccumulate(const TrainingLoop &Seen);

  /// By the file offset of the loop's body.
  llvm::MapVector<unsigned, TrainingLoop> TrainingLoops;
};

} // namespace accel::migrate
