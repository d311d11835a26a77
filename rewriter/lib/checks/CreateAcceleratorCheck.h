//===- CreateAcceleratorCheck.h - accel-migrate 'create-accelerator' --------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

namespace accel::migrate {

/// Creates `accel::Accelerator accelerator;` at the top of the host function, and binds
/// `accel::Accelerator &accelerator = accel::Accelerator::current();` at the top of every other
/// function body that uses it (AcceleratorReach): no signature of the user's changes.
class CreateAcceleratorCheck : public MigrationCheck {
public:
  explicit CreateAcceleratorCheck(MigrationContext &Context)
      : MigrationCheck("create-accelerator", Context) {}
  void finish() override;

private:
  void bindCurrent(const clang::FunctionDecl *Fn);
  /// Statement on a line of its own before the first of Body's.
  void insertFirstInBody(const clang::CompoundStmt *Body, const std::string &Statement);
  void createInHost();
};

} // namespace accel::migrate
