//===- ReduceMetricsCheck.h - accel-migrate 'reduce-metrics' -----------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

#include <set>
#include <vector>

namespace accel::migrate {

/// Training loops (over a prepared loader, with backward) often sum a running loss and a count
/// of correct predictions, then print them or divide them by the training set's size after the
/// loop. Each process sums only its share, so right after the loop each such accumulator is
/// summed across processes, once per epoch:
///
///     running_loss = accelerator.reduce(running_loss);
///
/// Accumulators are the numbers (or tensors) declared in the block that holds the loop, added
/// to (`+=`, `++`) inside it and read after it. On one process the reduction returns its input.
class ReduceMetricsCheck : public MigrationCheck {
public:
  explicit ReduceMetricsCheck(MigrationContext &Context)
      : MigrationCheck("reduce-metrics", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;

private:
  /// `x = accelerator.reduce(x);` after the loop for each of `Declared` in `Reduced` that is read
  /// after it and not reduced there already.
  void insertReductions(const clang::Stmt *LoopStmt,
                        const std::vector<const clang::VarDecl *> &Declared,
                        const std::set<const clang::VarDecl *> &Reduced,
                        const std::vector<const clang::Stmt *> &AfterLoop);
};

} // namespace accel::migrate
