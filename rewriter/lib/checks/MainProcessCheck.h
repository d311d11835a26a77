//===- MainProcessCheck.h - accel-migrate 'main-process' --------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// `torch::save` runs once, on the main process, after `wait_for_everyone()`; printing
/// (`std::cout`, `printf`, `puts`) in code that trains or evaluates happens on the main process.
class MainProcessCheck : public MigrationCheck {
public:
  explicit MainProcessCheck(MigrationContext &Context) : MigrationCheck("main-process", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
  void onEndOfTranslationUnit() override;

private:
  std::vector<const clang::Stmt *> Saves, Prints;
};

} // namespace accel::migrate
