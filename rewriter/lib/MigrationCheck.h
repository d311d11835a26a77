//===- MigrationCheck.h - Base class of the transformations -------------------------*- C++ -*-===//
//
// One transformation = one check, shaped like a clang-tidy check: it registers AST matchers,
// handles their matches, and may finish at the end of the translation unit. Its name is its
// --only/--skip name, its warning tag [accel-migrate-NAME] and its lit test's file name.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "MigrationContext.h"

#include "clang/ASTMatchers/ASTMatchFinder.h"

#include <string>

namespace accel::migrate {

class MigrationCheck : public clang::ast_matchers::MatchFinder::MatchCallback {
public:
  MigrationCheck(llvm::StringRef Name, MigrationContext &Context)
      : Name(Name.str()), Context(Context) {}

  virtual void registerMatchers(clang::ast_matchers::MatchFinder &) {}
  virtual void check(const clang::ast_matchers::MatchFinder::MatchResult &) {}
  /// Runs after every check has seen every match, once, in the registry's order.
  virtual void finish() {}

  llvm::StringRef name() const { return Name; }

protected:
  void warn(clang::SourceLocation Loc, const llvm::Twine &Message) {
    Context.warn(Name, Loc, Message);
  }
  /// The accelerator's name at S (recording that S's function needs it).
  std::string accelerator(const clang::Stmt *S) { return Context.accelerator(Name, S); }

  const std::string Name;
  MigrationContext &Context;

private:
  // MatchFinder's own end-of-file hook runs the callbacks in no set order; finish() is called
  // by the action instead.
  void onEndOfTranslationUnit() final {}
  void run(const clang::ast_matchers::MatchFinder::MatchResult &Result) final { check(Result); }
  llvm::StringRef getID() const final { return Name; }
};

} // namespace accel::migrate
