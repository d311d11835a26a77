//===- GatherForMetricsCheck.h - accel-migrate 'gather-for-metrics' ---------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

#include <optional>

namespace accel::migrate {

/// In evaluation loops (over a prepared loader, without backward), the metrics accumulated per
/// batch (`correct += pred.eq(target).sum().item<int64_t>()`, `loss_sum += loss.item<double>() *
/// data.size(0)`, `total += target.size(0)`) are computed from the whole evaluation batch of
/// every process, so each sample is counted once on any number of processes:
///
///  - the per-sample tensors the metrics start from (the model's output, the targets) are
///    gathered together, in one collective, by one `auto [all_output, all_target] =
///    accelerator.gather_for_metrics(output, target);` before the first accumulation;
///  - a local derived from them by LibTorch operations and read only by the metrics (`auto pred
///    = output.argmax(1);`) is taken from the gathered tensors where it is declared (`auto pred =
///    all_output.argmax(1);`), and the metrics reading it are left as written;
///  - other values derived from them (argmax, eq, a loss) are computed again from the gathered
///    tensors inside the accumulation, so a mean loss times the batch size stays the sum over
///    the samples, and `.item()` never sees a gathered vector;
///  - `x.size(0)` of a batch tensor counts the gathered batch, without gathering x.
class GatherForMetricsCheck : public MigrationCheck {
public:
  explicit GatherForMetricsCheck(MigrationContext &Context)
      : MigrationCheck("gather-for-metrics", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;

private:
  std::optional<clang::SourceLocation> lineAbove(clang::SourceLocation Loc);
  /// Warns where the loop hands a batch's values to an object that outlives it (a metric's
  /// update, a push_back): on several processes that object sees one process's share.
  void warnPerProcessCollections(const clang::CXXForRangeStmt *Loop);
};

} // namespace accel::migrate
