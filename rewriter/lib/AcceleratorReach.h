//===- AcceleratorReach.h - Where the Accelerator must be reachable -----------------*- C++ -*-===//
//
// Code a check rewrites to use the Accelerator must be able to name it. The host function (where
// the Accelerator is created) has it; any other function gets it as a parameter, and a method
// through a member of its class. This records, as the checks ask, which functions and classes
// need it; CreateAcceleratorCheck then adds the parameters, members and arguments. ProgramFacts
// says what the program had before the migration (an existing accelerator, the host).
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
  AcceleratorReach(clang::ASTContext &Ctx, const ProgramFacts &Facts) : Ctx(Ctx), Facts(Facts) {}

  /// The name under which the Accelerator is reachable at S, recording that S's function needs
  /// it. Empty when it cannot be made reachable (a lambda capturing by copy); `Why` then says so.
  std::string accelerator(const clang::Stmt *S, std::string &Why);
  /// Notes that Fn needs the Accelerator; returns the name to use in it. A method reaches it
  /// through a member of its class, so its class is noted too.
  std::string requireAccelerator(const clang::FunctionDecl *Fn);
  /// Notes that a class must hold an accel::Accelerator& member; returns the member's name.
  std::string requireMemberAccelerator(const clang::CXXRecordDecl *Class);

  /// Functions (other than the host) that need an Accelerator parameter, in discovery order.
  const llvm::SetVector<const clang::FunctionDecl *> &functionsNeedingAccelerator() const {
    return NeedAccelerator;
  }
  /// Classes that need an Accelerator member, in discovery order.
  const llvm::SetVector<const clang::CXXRecordDecl *> &classesNeedingAccelerator() const {
    return NeedMemberAccelerator;
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
  llvm::SetVector<const clang::CXXRecordDecl *> NeedMemberAccelerator;
  bool HostNeedsAccelerator = false;
};

} // namespace accel::migrate
