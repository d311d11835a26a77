//===- CreateAcceleratorCheck.h - accel-migrate 'create-accelerator' --------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// Creates `accel::Accelerator accelerator;` at the top of the host function and passes it,
/// as a first parameter `accel::Accelerator& accelerator`, to every other function that uses it
/// (and to their callers' calls).
class CreateAcceleratorCheck : public MigrationCheck {
public:
  explicit CreateAcceleratorCheck(MigrationContext &Context)
      : MigrationCheck("create-accelerator", Context) {}
  void finish() override;

private:
  void addParameter(const clang::FunctionDecl *Fn);
  /// `accel::Accelerator& accelerator` as Decl's first parameter; false when it cannot be edited.
  bool insertParameter(const clang::FunctionDecl *Decl);
  /// Acc as the first argument of Call.
  void passFirst(const clang::CallExpr *Call, const std::string &Acc);
  /// Item first in the list opened at Open whose items begin at Items: on a line of its own when
  /// they stand one per line, else at Inline, followed by ", ".
  void insertFirst(clang::SourceLocation Open, llvm::ArrayRef<clang::SourceLocation> Items,
                   const std::string &Item, clang::SourceLocation Inline);
  void addMember(const clang::CXXRecordDecl *Class);
  void addConstructorParameter(const clang::CXXConstructorDecl *Ctor);
  void bindInDefaultedConstructor(const clang::CXXConstructorDecl *Ctor);
  void passAccelerator(const clang::Expr *Site);
  void createInHost();
};

} // namespace accel::migrate
