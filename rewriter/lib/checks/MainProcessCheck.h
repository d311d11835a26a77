//===- MainProcessCheck.h - accel-migrate 'main-process' --------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// `torch::save` (and a TorchScript module's `save`) runs once, on the main process, after
/// `wait_for_everyone()` where every process reaches it; code the accelerator does not reach
/// guards it with `accel::state()`. A `torch::load` in a program that saves waits for the saves.
/// Printing (`std::cout`, `printf`, `puts`) in code that trains or evaluates happens on the main
/// process.
class MainProcessCheck : public MigrationCheck {
public:
  explicit MainProcessCheck(MigrationContext &Context) : MigrationCheck("main-process", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
  void finish() override;

private:
  /// True when Fn has the accelerator, or the migration gives it one.
  bool reachesAccelerator(const clang::FunctionDecl *Fn);
  void guardSave(const clang::Stmt *Save);
  void waitBeforeLoad(const clang::Stmt *Load);
  void replaceStream(const clang::Expr *Stream, const std::string &Acc);

  // Statements that save; statements that print, each with its printf/puts call (null for a
  // stream statement).
  std::vector<const clang::Stmt *> Saves, Loads;
  std::vector<std::pair<const clang::Stmt *, const clang::CallExpr *>> Prints;
};

} // namespace accel::migrate
