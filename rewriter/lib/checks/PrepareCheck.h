//===- PrepareCheck.h - accel-migrate 'prepare' -----------------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

#include <vector>

namespace accel::migrate {

/// Prepares models, optimizers, LR schedulers and data loaders where they are created,
/// keeping their names: `torch::optim::SGD opt(...)` becomes
/// `auto opt = accelerator.prepare(torch::optim::SGD(...))`, `make_data_loader` becomes
/// `accelerator.prepare_data_loader`, and `accelerator.prepare(model);` follows the model's
/// declaration (or its placement / weight loading). A model a function trains but does not
/// create is prepared where its caller creates it, or in the function when no caller is seen. A
/// scheduler stepped outside the batch loop is prepared per_epoch. `decltype(optimizer)` of an
/// optimizer so prepared names the type it was declared with (the prepared one derives from it).
class PrepareCheck : public MigrationCheck {
public:
  explicit PrepareCheck(MigrationContext &Context) : MigrationCheck("prepare", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;
  void finish() override;

private:
  /// `decltype(Var)` where Var is prepared by value becomes Type, the type it was declared with.
  void keepDeclaredType(const clang::VarDecl *Var, const std::string &Type);
  void prepareModel(const clang::VarDecl *Model);
  void prepareParameter(const ProgramFacts::TrainedParameter &Parameter);
  /// MoreArgs follow the object in the prepare call (", accel::SchedulerStepping::per_epoch").
  void prepareByValue(const clang::VarDecl *Var, const std::string &MoreArgs = "");
  void prepareLoader(const clang::VarDecl *Loader);
  /// `make_data_loader(...)` -> `accelerator.prepare_data_loader(...)`; false where it cannot.
  bool prepareMakeCall(const clang::CallExpr *Make);
  void prepareMemberModel(const clang::FieldDecl *Model);
  /// A model member empty when its object is built and set in methods afterwards (`model =
  /// new Net(...)` in a set-up method): prepared right after each time it is set.
  bool setAfterConstruction(const clang::FieldDecl *Model);
  void prepareAfterAssignments(const clang::FieldDecl *Model);
  void prepareMemberOptimizer(const clang::FieldDecl *Optimizer);
  void prepareMemberOptimizerPointer(const clang::FieldDecl *Optimizer);
  /// Value becomes `Acc.prepare(Value)`.
  void prepareExpression(const clang::Expr *Value, const std::string &Acc);

  /// The `decltype(name)` written in the files being migrated.
  std::vector<clang::DecltypeTypeLoc> Decltypes;
};

} // namespace accel::migrate
