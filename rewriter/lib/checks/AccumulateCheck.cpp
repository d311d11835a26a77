//===- AccumulateCheck.cpp ------------------------------------------------------------------===//
#include "AccumulateCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

// The models a loop body uses: prepared model variables and members, and model parameters of the
// function (a training function's model parameter is bound to the prepared model at its call).
std::vector<std::string> modelsUsedIn(MigrationContext &Context, const Stmt *Body) {
  struct Finder : RecursiveASTVisitor<Finder> {
    MigrationContext *Context;
    std::vector<std::string> Names;
    bool VisitDeclRefExpr(DeclRefExpr *DRE) {
      const auto *Var = dyn_cast<VarDecl>(DRE->getDecl());
      if (!Var || !isModule(Var->getType()))
        return true;
      if (!isa<ParmVarDecl>(Var) && !Context->facts().isPreparedModel(Var))
        return true;
      const std::string VarName = Var->getNameAsString();
      if (std::find(Names.begin(), Names.end(), VarName) == Names.end())
        Names.push_back(VarName);
      return true;
    }
    // A model member of the class whose method this is (`model_->forward(x)`).
    bool VisitMemberExpr(MemberExpr *ME) {
      const auto *Field = dyn_cast<FieldDecl>(ME->getMemberDecl());
      if (!Field || !isa<CXXThisExpr>(ME->getBase()->IgnoreParenImpCasts()) ||
          !Context->facts().isPreparedModel(Field))
        return true;
      const std::string FieldName = Field->getNameAsString();
      if (std::find(Names.begin(), Names.end(), FieldName) == Names.end())
        Names.push_back(FieldName);
      return true;
    }
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  } F;
  F.Context = &Context;
  F.TraverseStmt(const_cast<Stmt *>(Body));
  return F.Names;
}

bool declaresName(const FunctionDecl *Fn, StringRef Wanted) {
  struct Finder : RecursiveASTVisitor<Finder> {
    StringRef Wanted;
    bool Found = false;
    bool VisitNamedDecl(NamedDecl *D) {
      Found = Found || (D->getIdentifier() && D->getName() == Wanted);
      return !Found;
    }
  } F;
  F.Wanted = Wanted;
  F.TraverseDecl(const_cast<FunctionDecl *>(Fn));
  return F.Found;
}

bool isAccumulateScope(const Stmt *S) {
  const auto *Decl = dyn_cast_or_null<DeclStmt>(S);
  return Decl && Decl->isSingleDecl() && isa<VarDecl>(Decl->getSingleDecl()) &&
         containsAcceleratorCall(cast<VarDecl>(Decl->getSingleDecl())->getInit(), "accumulate");
}

// The loop's counters: the variables its init declares or assigns (`for (i = 0; ...)`).
std::vector<const VarDecl *> countersOf(const Stmt *Loop) {
  std::vector<const VarDecl *> Counters;
  const auto *For = dyn_cast<ForStmt>(Loop);
  if (!For || !For->getInit())
    return Counters;
  if (const auto *DS = dyn_cast<DeclStmt>(For->getInit()))
    for (const Decl *D : DS->decls())
      if (const auto *Var = dyn_cast<VarDecl>(D))
        Counters.push_back(Var);
  if (const auto *Assign = dyn_cast<BinaryOperator>(For->getInit());
      Assign && Assign->isAssignmentOp())
    if (const auto *Ref = dyn_cast<DeclRefExpr>(Assign->getLHS()->IgnoreParenImpCasts()))
      if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl()))
        Counters.push_back(Var);
  return Counters;
}

// Tensors a loop slices its batches from by hand, by its counter: `data.narrow(1, i, seq)`,
// `x.slice(0, i, i + batch)`, `x.index({Slice(i, i + batch)})`, `x[i]`. Declared outside the
// loop, so that one line before it can give each process its share.
std::vector<const VarDecl *> handSlicedTensors(const SourceManager &SM, const Stmt *Loop,
                                               const Stmt *Body) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const SourceManager *SM;
    std::vector<const VarDecl *> Counters;
    const Stmt *Loop;
    std::vector<const VarDecl *> Sliced;
    bool readsCounter(const Expr *E) {
      struct Reads : RecursiveASTVisitor<Reads> {
        const std::vector<const VarDecl *> *Counters;
        bool Found = false;
        bool VisitDeclRefExpr(DeclRefExpr *Ref) {
          Found = Found || llvm::is_contained(*Counters, Ref->getDecl());
          return !Found;
        }
      } R;
      R.Counters = &Counters;
      R.TraverseStmt(const_cast<Expr *>(E));
      return R.Found;
    }
    void note(const Expr *Object, llvm::ArrayRef<const Expr *> Args) {
      const auto *Ref = dyn_cast<DeclRefExpr>(Object->IgnoreParenImpCasts());
      const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
      if (!Var || !isTensor(Var->getType()) ||
          !SM->isBeforeInTranslationUnit(Var->getLocation(), Loop->getBeginLoc()) ||
          llvm::is_contained(Sliced, Var))
        return;
      if (llvm::any_of(Args, [&](const Expr *Arg) { return readsCounter(Arg); }))
        Sliced.push_back(Var);
    }
    bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
      const llvm::StringRef Method = plainName(Call->getMethodDecl());
      if (Method == "narrow" || Method == "slice" || Method == "index" || Method == "select")
        note(Call->getImplicitObjectArgument(),
             llvm::makeArrayRef(Call->getArgs(), Call->getNumArgs()));
      return true;
    }
    bool VisitCXXOperatorCallExpr(CXXOperatorCallExpr *Call) {
      if (Call->getOperator() == OO_Subscript && Call->getNumArgs() == 2)
        note(Call->getArg(0), {Call->getArg(1)});
      return true;
    }
  } F;
  F.SM = &SM;
  F.Counters = countersOf(Loop);
  F.Loop = Loop;
  if (!F.Counters.empty())
    F.TraverseStmt(const_cast<Stmt *>(Body));
  return F.Sliced;
}

} // namespace

void AccumulateCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(cxxForRangeStmt().bind("loop"), this);
  Finder.addMatcher(
      stmt(anyOf(forStmt(), whileStmt(), doStmt(), cxxForRangeStmt())).bind("any-loop"), this);
}

void AccumulateCheck::check(const MatchFinder::MatchResult &Result) {
  if (const auto *Loop = Result.Nodes.getNodeAs<Stmt>("any-loop")) {
    // backward() in a loop that is not over a prepared loader: which loop trains is unclear.
    const Stmt *Body = nullptr;
    if (const auto *For = dyn_cast<ForStmt>(Loop))
      Body = For->getBody();
    else if (const auto *While = dyn_cast<WhileStmt>(Loop))
      Body = While->getBody();
    else if (const auto *Do = dyn_cast<DoStmt>(Loop))
      Body = Do->getBody();
    else if (const auto *RangeFor = dyn_cast<CXXForRangeStmt>(Loop);
             RangeFor && !iteratesPreparedLoader(Context, RangeFor))
      Body = RangeFor->getBody();
    if (!Body || !Context.isEditable(Loop->getBeginLoc()) || !containsBackward(Body))
      return;
    // An inner loop over a prepared loader is the training loop; this one is an epoch loop.
    if (containsPreparedLoaderLoop(Context, Body))
      return;
    // Only the innermost such loop is reported.
    struct InnerBackwardLoop : RecursiveASTVisitor<InnerBackwardLoop> {
      bool Found = false;
      bool visitLoop(Stmt *LoopBody) {
        Found = Found || containsBackward(LoopBody);
        return !Found;
      }
      bool VisitForStmt(ForStmt *S) { return visitLoop(S->getBody()); }
      bool VisitWhileStmt(WhileStmt *S) { return visitLoop(S->getBody()); }
      bool VisitDoStmt(DoStmt *S) { return visitLoop(S->getBody()); }
      bool VisitCXXForRangeStmt(CXXForRangeStmt *S) { return visitLoop(S->getBody()); }
    } InnerLoop;
    InnerLoop.TraverseStmt(const_cast<Stmt *>(Body));
    if (InnerLoop.Found)
      return;
    // Batches sliced by hand (or read any other way than from a prepared loader) are the same on
    // every process: the job then trains N times on the whole data set, which a user who launched
    // N processes to share the work would not expect, and nothing else would tell them.
    // When the loop slices its batches from tensors by its counter, the fix is one line before
    // it: each process keeps its share of the batch dimension (the first).
    std::string Share;
    const FunctionDecl *Fn = Context.reach().enclosingFunction(Loop);
    const std::string Acc = Fn ? Context.facts().acceleratorIn(Fn) : "";
    for (const VarDecl *Sliced : handSlicedTensors(Context.sourceManager(), Loop, Body)) {
      const std::string Name = Sliced->getName().str();
      Share += (Share.empty() ? "" : " ") + Name + " = " + (Acc.empty() ? "accelerator" : Acc) +
               ".split_between_processes(" + Name + ");";
    }
    warn(Loop->getBeginLoc(),
         "backward() is called in a loop that does not iterate a prepared data loader, so it "
         "cannot be proven to be the training loop; open 'auto step = "
         "accelerator.accumulate(model);' at the top of the training step by hand; unless its "
         "batches come from a prepared data loader, every process trains on all of the data " +
             (Share.empty()
                  ? std::string("(take this process's share with "
                                "accelerator.split_between_processes)")
                  : "(to give each process its share of the batch dimension, add before the "
                    "loop: '" +
                        Share + "')"));
    return;
  }

  const auto *Loop = Result.Nodes.getNodeAs<CXXForRangeStmt>("loop");
  if (!iteratesPreparedLoader(Context, Loop) || !containsBackward(Loop->getBody()))
    return;
  const auto *Body = dyn_cast<CompoundStmt>(Loop->getBody());
  if (!Body) {
    if (Context.isEditable(Loop->getBeginLoc()))
      warn(Loop->getBeginLoc(), "the training loop's body is a single statement; put it in "
                                "braces and open 'auto step = accelerator.accumulate(model);'");
    return;
  }
  if (!Body->body_empty() && isAccumulateScope(Body->body_front()))
    return;
  if (!Context.canEdit(Name, Body->getSourceRange()))
    return;
  const std::string Acc = accelerator(Loop);
  if (Acc.empty())
    return;
  std::string Models;
  for (const std::string &Model : modelsUsedIn(Context, Body))
    Models += (Models.empty() ? "" : ", ") + Model;
  if (Models.empty())
    warn(Loop->getBeginLoc(), "no prepared model is used in this training loop by name; "
                              "accumulate() without a model synchronises gradients every step");
  const FunctionDecl *Fn = Context.reach().enclosingFunction(Loop);
  const std::string Var = Fn && declaresName(Fn, "step") ? "accumulate_step" : "step";
  const std::string Indent = Body->body_empty()
                                 ? Context.source().indentation(Loop->getBeginLoc()) +
                                       Context.source().indentStep(Loop->getBeginLoc())
                                 : Context.source().indentation(Body->body_front()->getBeginLoc());
  Context.insert(Name, Body->getLBracLoc().getLocWithOffset(1),
                 "\n" + Indent + "auto " + Var + " = " + Acc + ".accumulate(" + Models + ");");
  Context.applied(Name, Loop->getBeginLoc());
}

} // namespace accel::migrate
