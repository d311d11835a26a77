//===- ReduceMetricsCheck.h - accel-migrate 'reduce-metrics' -----------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

#include "llvm/ADT/MapVector.h"

#include <map>
#include <set>
#include <string>
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
/// to (`+=`, `++`) inside it and read after it. A number a training loop sets from a tensor's
/// item() (the last batch's loss) and reads after it is averaged instead:
///
///     last_loss = accelerator.reduce(last_loss, accel::Reduction::Mean);
///
/// On one process the reduction returns its input.
class ReduceMetricsCheck : public MigrationCheck {
public:
  explicit ReduceMetricsCheck(MigrationContext &Context)
      : MigrationCheck("reduce-metrics", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
  void finish() override;

private:
  struct Reduction {
    std::string Variable;
    bool Mean = false;
  };
  /// A loop seen once per instantiation of the template it is in: one set of reductions after
  /// it, the union of what each instantiation showed (a template's pattern cannot tell a loss's
  /// item() from any dependent call), in declaration order.
  struct PendingLoop {
    const clang::Stmt *Stmt = nullptr;
    std::string Accelerator;
    std::map<unsigned, Reduction> Reductions; // by the candidate's place
  };

  /// Notes `x = accelerator.reduce(x);` after the loop for each of `Declared` in `Reduced` (in
  /// `Averaged`: with accel::Reduction::Mean) that is read after it and not reduced there already;
  /// finish() writes them.
  void insertReductions(const clang::Stmt *LoopStmt,
                        const std::vector<const clang::VarDecl *> &Declared,
                        const std::set<const clang::VarDecl *> &Reduced,
                        const std::set<const clang::VarDecl *> &Averaged,
                        const std::vector<const clang::Stmt *> &AfterLoop);

  /// By the file offset of the loop.
  llvm::MapVector<unsigned, PendingLoop> Pending;
};

} // namespace accel::migrate
