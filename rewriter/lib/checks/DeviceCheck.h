//===- DeviceCheck.h - accel-migrate 'device' -------------------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// Device definitions become the accelerator's: `torch::Device device(torch::kCUDA)`,
/// the `cuda::is_available()` ternary, a DeviceType set from `cuda::is_available()`, temporaries
/// such as `torch::Device(torch::kCUDA, 0)` and assignments all become `accelerator.device()`.
/// `torch::Device device(torch::kCPU); if (torch::cuda::is_available()) device = torch::kCUDA;`
/// becomes one definition from `accelerator.device()`, and the if goes when that was all it did.
/// A device chosen from user input (a string) is reported, not rewritten.
class DeviceCheck : public MigrationCheck {
public:
  explicit DeviceCheck(MigrationContext &Context) : MigrationCheck("device", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;

private:
  void replaceInitializer(const clang::VarDecl *Var, const std::string &Value);
};

} // namespace accel::migrate
