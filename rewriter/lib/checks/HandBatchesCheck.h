//===- HandBatchesCheck.h - accel-migrate 'hand-batches' --------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// A training loop that slices its batches by hand, by its counter, from tensors along their
/// first dimension (`auto x = X.slice(0, i, i + batch_size)`, `X.narrow(0, i, n)`,
/// `X.index({Slice(i, i + n)})`) gives each process its share of every batch:
/// `auto x = accelerator.split_between_processes(X.slice(0, i, i + batch_size), true)`. The loop
/// runs as often on every process (so every backward is every process's), one process gets the
/// batch itself, and N processes train on the whole batch between them, as split batches do;
/// padding repeats a last row only where a batch has fewer rows than processes or does not
/// divide. Left as written, and reported, where the batch's size is used beyond its slicing (a
/// hidden state or a view sized by it would not fit a share).
class HandBatchesCheck : public MigrationCheck {
public:
  explicit HandBatchesCheck(MigrationContext &Context) : MigrationCheck("hand-batches", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
};

} // namespace accel::migrate
