//===- AttentionCheck.h - accel-migrate 'context-parallel-attention' --------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

#include <vector>

namespace accel::migrate {

/// In a program that gives its Accelerator a device mesh (an accel::ParallelismConfig) or opens
/// a context-parallel scope (maybe_context_parallel), `torch::scaled_dot_product_attention(...)`
/// becomes `accel::scaled_dot_product_attention(...)`: the same signature and, outside a
/// context-parallel scope, the same call; inside one, ring attention over the sequence shards.
/// Elsewhere the call is left alone: a program without context parallelism gains nothing.
class AttentionCheck : public MigrationCheck {
public:
  explicit AttentionCheck(MigrationContext &Context)
      : MigrationCheck("context-parallel-attention", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
  void finish() override;

private:
  bool HasMesh = false;
  std::vector<const clang::DeclRefExpr *> Attention; // the callees, as written
};

} // namespace accel::migrate
