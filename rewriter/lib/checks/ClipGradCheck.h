//===- ClipGradCheck.h - accel-migrate 'clip-grad' --------------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// `torch::nn::utils::clip_grad_norm_` / `clip_grad_value_` become the accelerator's.
class ClipGradCheck : public MigrationCheck {
public:
  explicit ClipGradCheck(MigrationContext &Context) : MigrationCheck("clip-grad", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
};

} // namespace accel::migrate
