//===- CudaApiCheck.h - accel-migrate 'cuda-api' ----------------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// Reports what needs a manual step and is left as written: CUDA streams and events,
/// raw CUDA runtime calls, `torch::cuda::manual_seed`.
class CudaApiCheck : public MigrationCheck {
public:
  explicit CudaApiCheck(MigrationContext &Context) : MigrationCheck("cuda-api", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
};

} // namespace accel::migrate
