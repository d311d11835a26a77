//===- AcceleratorReach.h - Where the Accelerator must be reachable -----------------*- C++ -*-===//
//
// Code a check rewrites to use the Accelerator must be able to name it. The host function (where
// the Accelerator is created) has it. Any other function binds the process's Accelerator at the
// top of its body, `accel::Accelerator &accelerator = accel::Accelerator::current();`, and an
// initializer outside any body (a constructor's member initializer, a default member
// initializer) calls `accel::Accelerator::current()` where it is: no signature, member or call
// of the user's changes, so callers in other files, function pointers, callbacks and templates
// are left as written (Python Accelerate's shared state, in the runtime's form). This records,
// as the checks ask, which functions bind it; CreateAcceleratorCheck writes the bindings and the
// host's Accelerator. ProgramFacts says what the program had before the migration (an existing
// accelerator parameter, member or local, the host).
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "ProgramFacts.h"

#include "clang/AST/ASTContext.h"
#include "llvm/ADT/SetVector.h"

#include <string>

namespace accel::migrate {

class AcceleratorReach {
public:
  /// What code outside any function body calls for the process's Accelerator.
  static constexpr const char *CurrentAccelerator = "accel::Accelerator::current()";

  AcceleratorReach(clang::ASTContext &Ctx, const ProgramFacts &Facts) : Ctx(Ctx), Facts(Facts) {}

  /// The expression naming the Accelerator at S, recording the binding S's function needs.
  /// Empty when S is in no function nor initializer (a namespace-scope variable, made before
  /// main creates the Accelerator); `Why` then says so.
  std::string accelerator(const clang::Stmt *S, std::string &Why);
  /// Notes that Fn's body uses the Accelerator; returns the name to use in it.
  std::string requireAccelerator(const clang::FunctionDecl *Fn);
  /// The name to use in Ctor's member initializers: its own accelerator parameter or its class's
  /// member where the program has one, else the process's Accelerator.
  std::string acceleratorInInitializer(const clang::CXXConstructorDecl *Ctor) const;
  /// The name to use in a default member initializer of Class.
  std::string acceleratorInClass(const clang::CXXRecordDecl *Class) const;

  /// Functions (other than the host) that bind the process's Accelerator, in discovery order.
  const llvm::SetVector<const clang::FunctionDecl *> &functionsNeedingAccelerator() const {
    return NeedAccelerator;
  }
  bool hostNeedsAccelerator() const { return HostNeedsAccelerator; }

  /// The function (or lambda call operator) whose body contains S, as written (not an
  /// instantiation).
  const clang::FunctionDecl *enclosingFunction(const clang::Stmt *S);
  /// The statement S is part of (through the declaration of `auto x = S;`), or null.
  const clang::Stmt *parentStmt(const clang::Stmt *S);

private:
  clang::ASTContext &Ctx;
  const ProgramFacts &Facts;
  llvm::SetVector<const clang::FunctionDecl *> NeedAccelerator;
  bool HostNeedsAccelerator = false;
};

} // namespace accel::migrate
