//===- MadeUnusedCheck.h - accel-migrate 'made-unused' ----------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

#include <vector>

namespace accel::migrate {

/// What the other transformations leave unused is not left behind silently. A variable or
/// parameter that the original code read, and that the migrated code no longer reads (its reads
/// were `.to(device)` calls now removed, or `torch::Device device(device_type)` now built from
/// accelerator.device()), would be dead code, and a warning under -Wall -Wextra:
///
///  - a parameter keeps its place (callers in other files still pass it) and loses its name to a
///    comment, `torch::Device /*device*/`, as clang-tidy's misc-unused-parameters does;
///  - a local with no initializer, or one without side effects, is removed with every plain
///    assignment to it (`device_type = torch::kCUDA;`);
///  - anything else is reported, naming the variable.
class MadeUnusedCheck : public MigrationCheck {
public:
  explicit MadeUnusedCheck(MigrationContext &Context) : MigrationCheck("made-unused", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
  void finish() override;

private:
  class MadeEdits;
  /// Var, read before the migration and read no more: its parameter name commented out, or the
  /// variable removed with its `Writes`, or it is reported.
  void settle(const clang::VarDecl *Var, const std::vector<const clang::Stmt *> &Writes,
              const MadeEdits &Edits);
  std::vector<const clang::FunctionDecl *> Functions;
};

} // namespace accel::migrate
