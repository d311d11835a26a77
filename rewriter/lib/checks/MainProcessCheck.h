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
  void finish() override;

private:
  void replaceStream(const clang::Expr *Stream, const std::string &Acc);

  // Statements that save; statements that print, each with its printf/puts call (null for a
  // stream statement).
  std::vector<const clang::Stmt *> Saves;
  std::vector<std::pair<const clang::Stmt *, const clang::CallExpr *>> Prints;
};

} // namespace accel::migrate
