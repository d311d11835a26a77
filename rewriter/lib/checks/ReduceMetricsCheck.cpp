//===- ReduceMetricsCheck.cpp ---------------------------------------------------------------===//
#include "ReduceMetricsCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Basic/SourceManager.h"

#include <set>

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

// The variable a statement adds to: `v += x`, `++v`, `v++`.
const VarDecl *addedTo(const Stmt *S) {
  const Expr *Target = nullptr;
  if (const auto *BO = dyn_cast<BinaryOperator>(S); BO && BO->getOpcode() == BO_AddAssign)
    Target = BO->getLHS();
  else if (const auto *UO = dyn_cast<UnaryOperator>(S); UO && UO->isIncrementOp())
    Target = UO->getSubExpr();
  else if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(S);
           Op && (Op->getOperator() == OO_PlusEqual || Op->getOperator() == OO_PlusPlus))
    Target = Op->getArg(0);
  if (!Target)
    return nullptr;
  if (const auto *Ref = dyn_cast<DeclRefExpr>(Target->IgnoreParenImpCasts()))
    return dyn_cast<VarDecl>(Ref->getDecl());
  return nullptr;
}

// `v = accelerator.reduce(v...)`: a previous migration already reduced v here.
bool reducesVariable(const Stmt *S, const VarDecl *Var) {
  if (const auto *E = dyn_cast<Expr>(S))
    S = E->IgnoreImplicit(); // the cleanups of a tensor assignment
  const Expr *Value = nullptr, *Target = nullptr;
  if (const auto *BO = dyn_cast<BinaryOperator>(S); BO && BO->getOpcode() == BO_Assign)
    Target = BO->getLHS(), Value = BO->getRHS();
  else if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(S);
           Op && Op->getOperator() == OO_Equal && Op->getNumArgs() == 2)
    Target = Op->getArg(0), Value = Op->getArg(1);
  if (!Target)
    return false;
  const auto *Ref = dyn_cast<DeclRefExpr>(Target->IgnoreParenImpCasts());
  if (!Ref || Ref->getDecl() != Var)
    return false;
  const auto *Call = dyn_cast<CallExpr>(stripTemporaries(Value));
  return Call && isAcceleratorMethodCall(Call, "reduce");
}

bool referencedIn(const Stmt *S, const VarDecl *Var) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const VarDecl *Var;
    bool Found = false;
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      Found = Found || Ref->getDecl() == Var;
      return !Found;
    }
  } F;
  F.Var = Var;
  F.TraverseStmt(const_cast<Stmt *>(S));
  return F.Found;
}

} // namespace

void ReduceMetricsCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(cxxForRangeStmt(hasParent(compoundStmt().bind("block"))).bind("loop"), this);
}

void ReduceMetricsCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Loop = Result.Nodes.getNodeAs<CXXForRangeStmt>("loop");
  const auto *Block = Result.Nodes.getNodeAs<CompoundStmt>("block");
  if (!iteratesPreparedLoader(Context, Loop) || !containsTrainingStep(Loop->getBody()) ||
      !Context.canEdit(Name, Loop->getSourceRange()))
    return;

  // The block's statements before and after the loop.
  std::vector<const Stmt *> BeforeLoop, AfterLoop;
  bool Seen = false;
  for (const Stmt *S : Block->body()) {
    if (S == Loop)
      Seen = true;
    else
      (Seen ? AfterLoop : BeforeLoop).push_back(S);
  }

  // Candidates: numbers and tensors declared before the loop in this block.
  std::vector<const VarDecl *> Declared;
  for (const Stmt *S : BeforeLoop)
    if (const auto *DS = dyn_cast<DeclStmt>(S))
      for (const Decl *D : DS->decls())
        if (const auto *Var = dyn_cast<VarDecl>(D)) {
          const QualType T = Var->getType().getNonReferenceType();
          if (!Var->getType()->isReferenceType() && !T.isConstQualified() &&
              ((T->isArithmeticType() && !T->isBooleanType()) || isTensor(T)))
            Declared.push_back(Var);
        }
  if (Declared.empty())
    return;

  // Those the loop adds to, in order of declaration.
  struct Adds : RecursiveASTVisitor<Adds> {
    std::set<const VarDecl *> Vars;
    bool VisitStmt(Stmt *S) {
      if (const VarDecl *Var = addedTo(S))
        Vars.insert(Var);
      return true;
    }
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  } A;
  A.TraverseStmt(const_cast<Stmt *>(Loop->getBody()));

  std::string Acc;
  const std::string Indent = Context.source().indentation(Loop->getBeginLoc());
  std::string Lines;
  for (const VarDecl *Var : Declared) {
    if (!A.Vars.count(Var))
      continue;
    bool ReadAfter = false, AlreadyReduced = false;
    for (const Stmt *S : AfterLoop) {
      AlreadyReduced = AlreadyReduced || reducesVariable(S, Var);
      ReadAfter = ReadAfter || referencedIn(S, Var);
    }
    if (!ReadAfter || AlreadyReduced)
      continue;
    if (Acc.empty())
      Acc = accelerator(Loop);
    if (Acc.empty())
      return;
    const std::string VarName = Var->getNameAsString();
    Lines +=
        (Lines.empty() ? "" : "\n" + Indent) + VarName + " = " + Acc + ".reduce(" + VarName + ");";
  }
  if (Lines.empty())
    return;
  Context.insertLineAfter(Name, Loop, Indent, Lines);
  Context.applied(Name, Loop->getBeginLoc());
}

} // namespace accel::migrate
