//===- DeviceCheck.cpp ----------------------------------------------------------------------===//
#include "DeviceCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"

#include <optional>

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

// A torch::Device built from a non-literal string: argv, a config value, an environment variable.
const Expr *userChosenString(const Expr *Init) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const Expr *Found = nullptr;
    bool VisitCXXConstructExpr(CXXConstructExpr *CE) {
      if (isDevice(CE->getType()) && CE->getNumArgs() >= 1) {
        const Expr *Arg = CE->getArg(0)->IgnoreUnlessSpelledInSource();
        if (isStringLike(Arg->getType()) && !isa<StringLiteral>(Arg->IgnoreParenImpCasts()))
          Found = Arg;
      }
      return !Found;
    }
  } F;
  F.TraverseStmt(const_cast<Expr *>(Init));
  return F.Found;
}

// `device = torch::Device(torch::kCUDA)` alone (or beside other statements) in the body of an
// `if (torch::cuda::is_available())` with no else, whose variable is defined in the statement
// before the if: that definition, and the if that only adjusts it.
struct ConditionalDevice {
  const VarDecl *Var = nullptr;
  const DeclStmt *Definition = nullptr;
  const IfStmt *If = nullptr;
  const Stmt *Statement = nullptr; // the assignment's statement
  bool OnlyStatement = false;      // the assignment is all the if does
};

std::optional<ConditionalDevice> conditionalDevice(MigrationContext &Context,
                                                   const CXXOperatorCallExpr *Assign) {
  const auto *Ref = dyn_cast<DeclRefExpr>(Assign->getArg(0)->IgnoreParenImpCasts());
  const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
  if (!Var || !Var->hasLocalStorage() || isa<ParmVarDecl>(Var) || !Var->getInit())
    return std::nullopt;
  ConditionalDevice Found;
  Found.Var = Var;
  const Stmt *Body = Assign;
  const Stmt *Parent = Context.reach().parentStmt(Assign);
  while (isa_and_nonnull<ExprWithCleanups>(Parent)) { // the statement is the whole expression
    Body = Parent;
    Parent = Context.reach().parentStmt(Parent);
  }
  Found.Statement = Body;
  if (const auto *Block = dyn_cast_or_null<CompoundStmt>(Parent)) {
    Found.OnlyStatement = Block->size() == 1;
    Body = Block;
    Parent = Context.reach().parentStmt(Block);
  } else {
    Found.OnlyStatement = true;
  }
  Found.If = dyn_cast_or_null<IfStmt>(Parent);
  const FunctionDecl *Fn = Context.reach().enclosingFunction(Assign);
  if (!Found.If || Found.If->getThen() != Body || Found.If->getElse() || Found.If->getInit() ||
      Found.If->getConditionVariable() || !mentionsCuda(Found.If->getCond(), Fn) ||
      mentionsCuda(Var->getInit(), Fn))
    return std::nullopt;
  // The definition is the statement just before the if.
  const auto *Enclosing = dyn_cast_or_null<CompoundStmt>(Context.reach().parentStmt(Found.If));
  if (!Enclosing)
    return std::nullopt;
  const Stmt *Previous = nullptr;
  for (const Stmt *S : Enclosing->body()) {
    if (S == Found.If)
      break;
    Previous = S;
  }
  const auto *Definition = dyn_cast_or_null<DeclStmt>(Previous);
  if (!Definition || !Definition->isSingleDecl() || Definition->getSingleDecl() != Var)
    return std::nullopt;
  Found.Definition = Definition;
  return Found;
}

} // namespace

void DeviceCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(
      varDecl(hasLocalStorage(), unless(parmVarDecl()), hasInitializer(expr())).bind("var"), this);
  Finder.addMatcher(cxxOperatorCallExpr(hasOverloadedOperatorName("=")).bind("assign"), this);
  Finder.addMatcher(cxxTemporaryObjectExpr().bind("temporary"), this);
  Finder.addMatcher(cxxFunctionalCastExpr().bind("temporary"), this);
}

void DeviceCheck::replaceInitializer(const VarDecl *Var, const std::string &Value) {
  const Expr *Init = Var->getInit();
  const auto *Construct = dyn_cast<CXXConstructExpr>(Init->IgnoreImplicit());
  if (Var->getInitStyle() != VarDecl::CInit && Construct &&
      Construct->getParenOrBraceRange().isValid()) {
    // torch::Device device(torch::kCUDA, 0)  ->  torch::Device device(accelerator.device())
    const SourceRange Parens = Construct->getParenOrBraceRange();
    Context.replace(
        Name, CharSourceRange::getCharRange(Parens.getBegin().getLocWithOffset(1), Parens.getEnd()),
        Value);
  } else {
    Context.replace(Name, Init->getSourceRange(), Value);
  }
}

void DeviceCheck::check(const MatchFinder::MatchResult &Result) {
  if (const auto *Var = Result.Nodes.getNodeAs<VarDecl>("var")) {
    if (!isDevice(Var->getType()) || Var->getType()->isReferenceType())
      return;
    const Expr *Init = Var->getInit();
    const auto *Fn = dyn_cast_or_null<FunctionDecl>(Var->getParentFunctionOrMethod());
    if (!Context.isEditable(Var->getLocation()) || containsAcceleratorCall(Init))
      return;
    if (const Expr *Chosen = userChosenString(Init)) {
      warn(Chosen->getBeginLoc(),
           "the device is chosen from user input and is left as it is; under accel launch each "
           "process must use accelerator.device() (choose CPU with accel launch --cpu)");
      return;
    }
    if (!mentionsCuda(Init, Fn) || !Context.canEdit(Name, Init->getSourceRange()))
      return;
    const std::string Acc = accelerator(Init);
    if (Acc.empty())
      return;
    replaceInitializer(Var, Acc + ".device()");
    Context.applied(Name, Var->getLocation());
    return;
  }

  if (const auto *Assign = Result.Nodes.getNodeAs<CXXOperatorCallExpr>("assign")) {
    if (Assign->getNumArgs() != 2 || !isDevice(Assign->getArg(0)->getType()))
      return;
    const Expr *Value = Assign->getArg(1);
    const FunctionDecl *Fn = Context.reach().enclosingFunction(Assign);
    if (containsAcceleratorCall(Value) || !mentionsCuda(Value, Fn) ||
        !Context.canEdit(Name, Value->getSourceRange()))
      return;
    const std::string Acc = accelerator(Assign);
    if (Acc.empty())
      return;
    if (auto Idiom = conditionalDevice(Context, Assign);
        Idiom && Context.canEdit(Name, Idiom->Var->getInit()->getSourceRange()) &&
        Context.canEdit(Name, Idiom->If->getSourceRange())) {
      // torch::Device device(torch::kCPU); if (torch::cuda::is_available()) device = ...;
      //   ->  torch::Device device(accelerator.device());
      replaceInitializer(Idiom->Var, Acc + ".device()");
      Context.removeStatement(Name, Idiom->OnlyStatement ? static_cast<const Stmt *>(Idiom->If)
                                                         : Idiom->Statement);
      Context.applied(Name, Idiom->Var->getLocation());
      return;
    }
    Context.replace(Name, Value->getSourceRange(), Acc + ".device()");
    Context.applied(Name, Assign->getBeginLoc());
    return;
  }

  const auto *Temporary = Result.Nodes.getNodeAs<Expr>("temporary");
  if (!Temporary || !isDevice(Temporary->getType()))
    return;
  // A variable's initializer is handled with the variable.
  for (const DynTypedNode &Parent : Context.ast().getParents(*Temporary))
    if (Parent.get<VarDecl>())
      return;
  if (!mentionsCuda(Temporary, Context.reach().enclosingFunction(Temporary)) ||
      !Context.canEdit(Name, Temporary->getSourceRange()))
    return;
  const std::string Acc = accelerator(Temporary);
  if (Acc.empty())
    return;
  Context.replace(Name, Temporary->getSourceRange(), Acc + ".device()");
  Context.applied(Name, Temporary->getBeginLoc());
}

} // namespace accel::migrate
