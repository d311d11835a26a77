//===- GatherForMetricsCheck.cpp ------------------------------------------------------------===//
#include "GatherForMetricsCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/AST/RecursiveASTVisitor.h"

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

// A tensor reduced to a scalar per process (x.sum(), x.item()) cannot be gathered per sample.
bool isReducedToScalar(const VarDecl *Var) {
  const Expr *Init = Var->getInit();
  if (!Init)
    return false;
  Init = Init->IgnoreImplicit();
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(Init); Construct && Construct->getNumArgs() == 1)
    Init = Construct->getArg(0)->IgnoreImplicit();
  const auto *Call = dyn_cast<CXXMemberCallExpr>(Init);
  if (!Call || !Call->getMethodDecl() || !explicitArgs(Call).empty())
    return false;
  const StringRef Method = plainName(Call->getMethodDecl());
  return Method == "sum" || Method == "mean" || Method == "item" || Method == "norm" ||
         Method == "max" || Method == "min" || Method == "all" || Method == "any";
}

struct MetricLeaves : RecursiveASTVisitor<MetricLeaves> {
  MigrationContext *Context;
  const CXXForRangeStmt *Loop;
  std::vector<const Expr *> Leaves;

  bool declaredInLoop(const VarDecl *Var) const {
    const SourceManager &SM = Context->sourceManager();
    const SourceRange R = Loop->getSourceRange();
    return Var == Loop->getLoopVariable() ||
           (!SM.isBeforeInTranslationUnit(Var->getLocation(), R.getBegin()) &&
            !SM.isBeforeInTranslationUnit(R.getEnd(), Var->getLocation()));
  }
  bool alreadyGathered(const Expr *E) const {
    const Stmt *Current = E;
    for (const Stmt *P = Context->parentStmt(Current); P; P = Context->parentStmt(P)) {
      if (isa<ImplicitCastExpr>(P) || isa<MaterializeTemporaryExpr>(P) || isa<CXXConstructExpr>(P))
        continue;
      const auto *Call = dyn_cast<CXXMemberCallExpr>(P);
      return Call && Call->getMethodDecl() &&
             plainName(Call->getMethodDecl()) == "gather_for_metrics";
    }
    return false;
  }
  void consider(const Expr *E, const VarDecl *Var) {
    if (!isTensor(E->getType()) || !declaredInLoop(Var) || alreadyGathered(E))
      return;
    if (Var != Loop->getLoopVariable() && isReducedToScalar(Var))
      return;
    Leaves.push_back(E);
  }
  bool TraverseMemberExpr(MemberExpr *ME) {
    // batch.target: a member of the loop variable is one leaf, not to be split further.
    if (isTensor(ME->getType()))
      if (const auto *Var = dyn_cast_or_null<VarDecl>(rootDecl(ME));
          Var && Var == Loop->getLoopVariable()) {
        consider(ME, Var);
        return true;
      }
    return RecursiveASTVisitor::TraverseMemberExpr(ME);
  }
  bool VisitDeclRefExpr(DeclRefExpr *DRE) {
    if (const auto *Var = dyn_cast<VarDecl>(DRE->getDecl()); Var && Var->isLocalVarDecl())
      consider(DRE, Var);
    return true;
  }
  bool TraverseLambdaExpr(LambdaExpr *) { return true; }
};

} // namespace

void GatherForMetricsCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(
      cxxForRangeStmt(forEachDescendant(
                          stmt(anyOf(binaryOperator(hasOperatorName("+=")),
                                     cxxOperatorCallExpr(hasOverloadedOperatorName("+="))))
                              .bind("accumulation")))
          .bind("loop"),
      this);
}

void GatherForMetricsCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Loop = Result.Nodes.getNodeAs<CXXForRangeStmt>("loop");
  const auto *Accumulation = Result.Nodes.getNodeAs<Stmt>("accumulation");
  // Evaluation loops only: over a prepared loader, no backward.
  if (!iteratesPreparedLoader(Context, Loop) || containsBackward(Loop->getBody()))
    return;
  const Expr *Value = nullptr;
  if (const auto *BO = dyn_cast<BinaryOperator>(Accumulation))
    Value = BO->getRHS();
  else if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Accumulation); Op && Op->getNumArgs() == 2)
    Value = Op->getArg(1);
  if (!Value || !Context.canEdit(Name, Accumulation->getSourceRange()))
    return;
  MetricLeaves Finder;
  Finder.Context = &Context;
  Finder.Loop = Loop;
  Finder.TraverseStmt(const_cast<Expr *>(Value));
  if (Finder.Leaves.empty())
    return;
  const std::string Acc = accelerator(Accumulation);
  if (Acc.empty())
    return;
  for (const Expr *Leaf : Finder.Leaves)
    Context.replace(Name, Leaf->getSourceRange(),
                    Acc + ".gather_for_metrics(" + Context.text(Leaf->getSourceRange()) + ")");
  Context.applied(Name, Accumulation->getBeginLoc());
}

} // namespace accel::migrate
