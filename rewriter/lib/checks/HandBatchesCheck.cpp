//===- HandBatchesCheck.cpp -----------------------------------------------------------------===//
#include "HandBatchesCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

void HandBatchesCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(forStmt().bind("loop"), this);
}

void HandBatchesCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Loop = Result.Nodes.getNodeAs<ForStmt>("loop");
  if (!Context.isEditable(Loop->getBeginLoc()) || !Loop->getBody() ||
      !containsBackward(Loop->getBody()) || containsPreparedLoaderLoop(Context, Loop->getBody()))
    return;
  std::string Refusal;
  const std::vector<HandSlicedBatch> Batches = handSlicedBatches(Context, Loop, &Refusal);
  if (Batches.empty()) {
    if (!Refusal.empty())
      warn(Loop->getBeginLoc(), Refusal + "; give each process its share by hand "
                                          "(accelerator.split_between_processes)");
    return;
  }
  for (const HandSlicedBatch &Batch : Batches)
    if (!Context.canEdit(Name, Batch.Init->getSourceRange()))
      return;
  const std::string Acc = accelerator(Loop);
  if (Acc.empty())
    return;
  // One process gets the batch itself; N processes a contiguous share each, padded with the
  // batch's last row where it does not divide, so that no process gets an empty batch.
  for (const HandSlicedBatch &Batch : Batches) {
    Context.replaceFormatted(Name, CharSourceRange::getTokenRange(Batch.Init->getSourceRange()),
                             Acc + ".split_between_processes(" +
                                 Context.source().text(Batch.Init->getSourceRange()) +
                                 ", /*apply_padding=*/true)");
    Context.applied(Name, Batch.Local->getLocation());
  }
}

} // namespace accel::migrate
