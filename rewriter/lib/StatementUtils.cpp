//===- StatementUtils.cpp -------------------------------------------------------------------===//
#include "StatementUtils.h"

#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/AST/RecursiveASTVisitor.h"

#include <optional>
#include <set>
#include <string>

using namespace clang;

namespace accel::migrate {

const Expr *stripTemporaries(const Expr *E) {
  while (true) {
    E = E->IgnoreParenImpCasts();
    if (const auto *M = dyn_cast<MaterializeTemporaryExpr>(E))
      E = M->getSubExpr();
    else if (const auto *B = dyn_cast<CXXBindTemporaryExpr>(E))
      E = B->getSubExpr();
    else if (const auto *C = dyn_cast<CXXConstructExpr>(E); C && C->getNumArgs() == 1)
      E = C->getArg(0);
    else
      return E;
  }
}

std::vector<const Expr *> explicitArgs(const CallExpr *Call) {
  std::vector<const Expr *> Args;
  for (const Expr *Arg : Call->arguments())
    if (!isa<CXXDefaultArgExpr>(Arg))
      Args.push_back(Arg);
  return Args;
}

const Stmt *asFullStatement(MigrationContext &Context, const Expr *E) {
  const Stmt *Current = E;
  for (unsigned Guard = 0; Guard < 16; ++Guard) {
    const Stmt *Parent = Context.reach().parentStmt(Current);
    if (!Parent)
      return nullptr;
    if (isa<ExprWithCleanups>(Parent) || isa<ImplicitCastExpr>(Parent) ||
        isa<CXXBindTemporaryExpr>(Parent) || isa<MaterializeTemporaryExpr>(Parent)) {
      Current = Parent;
      continue;
    }
    if (isa<Expr>(Parent))
      return nullptr; // part of a larger expression
    // The condition or init of a control statement is not a statement of its own.
    if (const auto *If = dyn_cast<IfStmt>(Parent); If && If->getCond() == Current)
      return nullptr;
    if (const auto *For = dyn_cast<ForStmt>(Parent); For && For->getBody() != Current)
      return nullptr;
    if (const auto *While = dyn_cast<WhileStmt>(Parent); While && While->getCond() == Current)
      return nullptr;
    if (isa<ReturnStmt>(Parent) || isa<DeclStmt>(Parent))
      return nullptr;
    return Current;
  }
  return nullptr;
}

const CXXForRangeStmt *rangeForOver(MigrationContext &Context, const Stmt *S,
                                    const ValueDecl *Var) {
  for (const Stmt *P = Context.reach().parentStmt(S); P; P = Context.reach().parentStmt(P))
    if (const auto *Loop = dyn_cast<CXXForRangeStmt>(P); Loop && Loop->getLoopVariable() == Var)
      return Loop;
  return nullptr;
}

namespace {

// `accel::state().is_main_process()` (or is_local_main_process) somewhere in S.
bool asksProcessStateForMain(const Stmt *S) {
  struct Finder : RecursiveASTVisitor<Finder> {
    bool Found = false;
    bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
      const CXXMethodDecl *Method = Call->getMethodDecl();
      Found = Found ||
              (Method && Method->getParent()->getQualifiedNameAsString() == "accel::ProcessState" &&
               (plainName(Method) == "is_main_process" ||
                plainName(Method) == "is_local_main_process"));
      return !Found;
    }
  } F;
  F.TraverseStmt(const_cast<Stmt *>(S));
  return F.Found;
}

} // namespace

bool guardedByMainProcess(MigrationContext &Context, const Stmt *S) {
  for (const Stmt *P = Context.reach().parentStmt(S); P; P = Context.reach().parentStmt(P))
    if (const auto *If = dyn_cast<IfStmt>(P))
      if (containsAcceleratorCall(If->getCond(), "is_main_process") ||
          containsAcceleratorCall(If->getCond(), "is_local_main_process") ||
          asksProcessStateForMain(If->getCond()))
        return true;
  return false;
}

bool underCondition(MigrationContext &Context, const Stmt *S) {
  const Stmt *Child = S;
  for (const Stmt *P = Context.reach().parentStmt(S); P;
       Child = P, P = Context.reach().parentStmt(P)) {
    if (const auto *If = dyn_cast<IfStmt>(P); If && Child != If->getCond())
      return true;
    if (isa<SwitchStmt>(P) || isa<ConditionalOperator>(P) || isa<BinaryConditionalOperator>(P))
      return true;
    if (const auto *BO = dyn_cast<BinaryOperator>(P);
        BO && BO->isLogicalOp() && Child == BO->getRHS())
      return true;
  }
  return false;
}

const Stmt *loopBody(const Stmt *Loop) {
  if (const auto *For = dyn_cast<ForStmt>(Loop))
    return For->getBody();
  if (const auto *RangeFor = dyn_cast<CXXForRangeStmt>(Loop))
    return RangeFor->getBody();
  if (const auto *While = dyn_cast<WhileStmt>(Loop))
    return While->getBody();
  if (const auto *Do = dyn_cast<DoStmt>(Loop))
    return Do->getBody();
  return nullptr;
}

bool iteratesPreparedLoader(MigrationContext &Context, const CXXForRangeStmt *Loop) {
  const Expr *Range = Loop->getRangeInit();
  return Range && Context.facts().isPreparedLoader(rootDecl(Range));
}

bool containsPreparedLoaderLoop(MigrationContext &Context, const Stmt *S) {
  struct Finder : RecursiveASTVisitor<Finder> {
    MigrationContext *Context;
    bool Found = false;
    bool VisitCXXForRangeStmt(CXXForRangeStmt *Loop) {
      Found = Found || iteratesPreparedLoader(*Context, Loop);
      return !Found;
    }
  } F;
  F.Context = &Context;
  F.TraverseStmt(const_cast<Stmt *>(S));
  return F.Found;
}

std::string argumentsText(MigrationContext &Context, const std::vector<const Expr *> &Args,
                          size_t First) {
  if (First >= Args.size())
    return {};
  return Context.source().text(SourceRange(Args[First]->getBeginLoc(), Args.back()->getEndLoc()));
}

namespace {
struct PureComputation : RecursiveASTVisitor<PureComputation> {
  bool Pure = true;
  bool VisitCallExpr(CallExpr *Call) {
    if (const auto *Member = dyn_cast<CXXMemberCallExpr>(Call)) {
      if (isTensor(Member->getImplicitObjectArgument()->IgnoreParenImpCasts()->getType()))
        return true;
    }
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call)) {
      if (Op->getOperator() == OO_Call) {
        const auto *Class = Op->getArg(0)->getType()->getAsCXXRecordDecl();
        Pure = Pure && Class &&
               llvm::StringRef(Class->getQualifiedNameAsString()).startswith("torch::nn::") &&
               Class->getName().endswith("Loss");
        return Pure;
      }
      return true;
    }
    const FunctionDecl *Callee = Call->getDirectCallee();
    if (!Callee || isa<CXXMethodDecl>(Callee)) {
      Pure = false; // a model's forward, a method of the user's
      return false;
    }
    const std::string Qualified = Callee->getQualifiedNameAsString();
    Pure = Pure && (llvm::StringRef(Qualified).startswith("torch::") ||
                    llvm::StringRef(Qualified).startswith("at::"));
    return Pure;
  }
  bool TraverseLambdaExpr(LambdaExpr *) {
    Pure = false;
    return false;
  }
};

} // namespace

bool isPureTensorComputation(const Expr *E) {
  PureComputation Check;
  Check.TraverseStmt(const_cast<Expr *>(E));
  return Check.Pure;
}

bool takesItemOfBatchResult(const CXXForRangeStmt *Loop, const Expr *Value, bool InPlaceToo) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const CXXForRangeStmt *Loop;
    bool InPlaceToo;
    bool Found = false;
    bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
      const CXXMethodDecl *Method = Call->getMethodDecl();
      if (!Method || plainName(Method) != "item")
        return true;
      const Expr *Object = stripTemporaries(Call->getImplicitObjectArgument());
      const auto *Ref = dyn_cast<DeclRefExpr>(Object);
      // `criterion(model->forward(x), y).item<double>()`: the loss computed in place.
      if (!Ref && isTensor(Object->getType()) && !isa<MemberExpr>(Object->IgnoreParenImpCasts())) {
        Found = Found || (InPlaceToo && !isPureTensorComputation(Object));
        return !Found;
      }
      const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
      if (!Var || !Var->getInit() || !isTensor(Var->getType()) || Var == Loop->getLoopVariable())
        return true;
      // Declared in the loop's body, from more than the samples (a forward, a user's call).
      const SourceRange Body = Loop->getBody()->getSourceRange();
      const bool InBody =
          Body.getBegin() < Var->getLocation() && Var->getLocation() < Body.getEnd();
      Found = Found || (InBody && !isPureTensorComputation(Var->getInit()));
      return !Found;
    }
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  } F;
  F.Loop = Loop;
  F.InPlaceToo = InPlaceToo;
  F.TraverseStmt(const_cast<Expr *>(Value));
  return F.Found;
}

namespace {

// `-1`, as a literal or as the first element of a braced list (`{-1, n}`).
bool isMinusOneFirst(const Expr *E) {
  E = E->IgnoreParenImpCasts();
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E); Construct && Construct->getNumArgs())
    return isMinusOneFirst(Construct->getArg(0));
  if (const auto *List = dyn_cast<InitListExpr>(E))
    return List->getNumInits() && isMinusOneFirst(List->getInit(0));
  if (const auto *Std = dyn_cast<CXXStdInitializerListExpr>(E))
    return isMinusOneFirst(Std->getSubExpr());
  if (const auto *Temp = dyn_cast<MaterializeTemporaryExpr>(E))
    return isMinusOneFirst(Temp->getSubExpr());
  if (const auto *Array = dyn_cast<ArrayInitLoopExpr>(E))
    return isMinusOneFirst(Array->getCommonExpr()->getSourceExpr());
  const auto *Minus = dyn_cast<UnaryOperator>(E);
  const auto *One =
      Minus ? dyn_cast<IntegerLiteral>(Minus->getSubExpr()->IgnoreParenImpCasts()) : nullptr;
  return Minus && Minus->getOpcode() == UO_Minus && One && One->getValue() == 1;
}

// A call that turns a batch's rows into tokens (or some rows of it).
bool mergesRows(const CallExpr *Call) {
  const FunctionDecl *Callee = Call->getDirectCallee();
  if (!Callee)
    return false;
  const llvm::StringRef Name = plainName(Callee);
  if (Name == "pack_padded_sequence" || Name == "pack_sequence" || Name == "masked_select" ||
      Name == "nonzero")
    return true;
  if (!isa<CXXMemberCallExpr>(Call))
    return false;
  if (Name == "view" || Name == "reshape")
    return Call->getNumArgs() >= 1 && isMinusOneFirst(Call->getArg(0));
  if (Name == "flatten") {
    const auto *Start = Call->getNumArgs()
                            ? dyn_cast<IntegerLiteral>(Call->getArg(0)->IgnoreParenImpCasts())
                            : nullptr;
    return Call->getNumArgs() == 0 || (Start && Start->getValue() == 0);
  }
  return false;
}

} // namespace

bool readsTokensNotSamples(const CXXForRangeStmt *Loop, const Expr *Value) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const CXXForRangeStmt *Loop;
    std::set<const VarDecl *> Seen;
    bool Found = false;
    bool VisitCallExpr(CallExpr *Call) {
      Found = Found || mergesRows(Call);
      return !Found;
    }
    // A local of the loop's body: what it was computed from.
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
      const SourceRange Body = Loop->getBody()->getSourceRange();
      if (!Var || !Var->getInit() || Var == Loop->getLoopVariable() ||
          !(Body.getBegin() < Var->getLocation() && Var->getLocation() < Body.getEnd()) ||
          !Seen.insert(Var).second)
        return true;
      TraverseStmt(const_cast<Expr *>(Var->getInit()));
      return !Found;
    }
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  } F;
  F.Loop = Loop;
  F.TraverseStmt(const_cast<Expr *>(Value));
  return F.Found;
}

std::vector<const VarDecl *> loopCounters(const Stmt *Loop) {
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

namespace {

// The variables E reads.
std::vector<const VarDecl *> variablesIn(const Expr *E) {
  struct Reads : RecursiveASTVisitor<Reads> {
    std::vector<const VarDecl *> Found;
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
          Var && !llvm::is_contained(Found, Var))
        Found.push_back(Var);
      return true;
    }
  } R;
  R.TraverseStmt(const_cast<Expr *>(E));
  return R.Found;
}

bool isZeroLiteral(const Expr *E) {
  const auto *Literal = dyn_cast<IntegerLiteral>(E->IgnoreParenImpCasts());
  return Literal && Literal->getValue() == 0;
}

// The Slice that an index list starts with (`{Slice(i, i + n), ...}`), or null.
const Expr *firstSlice(const Expr *List) {
  const Expr *E = List;
  for (unsigned Guard = 0; E && Guard < 8; ++Guard) {
    E = E->IgnoreParenImpCasts();
    if (const auto *Temp = dyn_cast<MaterializeTemporaryExpr>(E))
      E = Temp->getSubExpr();
    else if (const auto *Bind = dyn_cast<CXXBindTemporaryExpr>(E))
      E = Bind->getSubExpr();
    else if (const auto *Std = dyn_cast<CXXStdInitializerListExpr>(E))
      E = Std->getSubExpr();
    else if (const auto *Init = dyn_cast<InitListExpr>(E))
      E = Init->getNumInits() ? Init->getInit(0) : nullptr;
    else if (const auto *Cast = dyn_cast<CXXFunctionalCastExpr>(E))
      return isClassOrDerived(Cast->getType(), "at::indexing::Slice") ? Cast : nullptr;
    else if (const auto *Construct = dyn_cast<CXXConstructExpr>(E)) {
      if (isClassOrDerived(Construct->getType(), "at::indexing::Slice"))
        return Construct;
      E = Construct->getNumArgs() ? Construct->getArg(0) : nullptr;
    } else
      return nullptr;
  }
  return nullptr;
}

// The slicing call under an initializer's placement (`X.slice(0, i, i + n).to(device)`).
const CXXMemberCallExpr *slicingCall(const Expr *Init) {
  const auto *Call = dyn_cast<CXXMemberCallExpr>(stripTemporaries(Init));
  while (Call && Call->getMethodDecl()) {
    const llvm::StringRef Method = plainName(Call->getMethodDecl());
    if (Method == "slice" || Method == "narrow" || Method == "index")
      return Call;
    if (Method != "to" && Method != "cuda" && Method != "cpu" && Method != "contiguous" &&
        Method != "float" && Method != "detach" && Method != "clone")
      return nullptr;
    Call = dyn_cast<CXXMemberCallExpr>(stripTemporaries(Call->getImplicitObjectArgument()));
  }
  return nullptr;
}

// A first-dimension range of a slicing call (its arguments), or null when it slices otherwise.
std::optional<std::vector<const Expr *>> firstDimensionRange(const CXXMemberCallExpr *Call) {
  const llvm::StringRef Method = plainName(Call->getMethodDecl());
  if ((Method == "slice" || Method == "narrow") && Call->getNumArgs() >= 3 &&
      isZeroLiteral(Call->getArg(0)))
    return std::vector<const Expr *>{Call->getArg(1), Call->getArg(2)};
  if (Method == "index" && Call->getNumArgs() == 1)
    if (const Expr *Slice = firstSlice(Call->getArg(0)))
      return std::vector<const Expr *>{Slice};
  return std::nullopt;
}

// Every read of Var in Within, other than inside the statements of Allowed.
std::vector<const DeclRefExpr *> readsOutside(const Stmt *Within, const VarDecl *Var,
                                              const std::vector<const Stmt *> &Allowed) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const VarDecl *Var;
    const std::vector<const Stmt *> *Allowed;
    std::vector<const DeclRefExpr *> Found;
    bool TraverseStmt(Stmt *S) {
      if (!S || llvm::is_contained(*Allowed, S))
        return true;
      return RecursiveASTVisitor::TraverseStmt(S);
    }
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      if (Ref->getDecl() == Var)
        Found.push_back(Ref);
      return true;
    }
  } F;
  F.Var = Var;
  F.Allowed = &Allowed;
  F.TraverseStmt(const_cast<Stmt *>(Within));
  return F.Found;
}

// The variable whose declaration Ref is part of (`auto h = torch::zeros({batch_size, n})`).
const VarDecl *declaredWith(MigrationContext &Context, const DeclRefExpr *Ref) {
  for (const Stmt *P = Context.reach().parentStmt(Ref); P; P = Context.reach().parentStmt(P))
    if (const auto *DS = dyn_cast<DeclStmt>(P))
      return DS->isSingleDecl() ? dyn_cast<VarDecl>(DS->getSingleDecl()) : nullptr;
  return nullptr;
}

} // namespace

std::vector<CountedSlice> countedSlices(const SourceManager &SM, const Stmt *Loop) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const SourceManager *SM;
    const Stmt *Loop;
    std::vector<const VarDecl *> Counters;
    std::vector<CountedSlice> Found;
    void note(const Expr *Call, const Expr *Object, llvm::ArrayRef<const Expr *> Args) {
      const auto *Ref = dyn_cast<DeclRefExpr>(Object->IgnoreParenImpCasts());
      const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
      if (!Var || !isTensor(Var->getType()) ||
          !SM->isBeforeInTranslationUnit(Var->getLocation(), Loop->getBeginLoc()))
        return;
      for (const Expr *Arg : Args)
        for (const VarDecl *Read : variablesIn(Arg))
          if (llvm::is_contained(Counters, Read)) {
            Found.push_back({Call, Var});
            return;
          }
    }
    bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
      const llvm::StringRef Method = plainName(Call->getMethodDecl());
      if (Method == "narrow" || Method == "slice" || Method == "index" || Method == "select")
        note(Call, Call->getImplicitObjectArgument(),
             llvm::makeArrayRef(Call->getArgs(), Call->getNumArgs()));
      return true;
    }
    bool VisitCXXOperatorCallExpr(CXXOperatorCallExpr *Call) {
      if (Call->getOperator() == OO_Subscript && Call->getNumArgs() == 2)
        note(Call, Call->getArg(0), {Call->getArg(1)});
      return true;
    }
  } F;
  F.SM = &SM;
  F.Loop = Loop;
  F.Counters = loopCounters(Loop);
  if (!F.Counters.empty())
    F.TraverseStmt(const_cast<Stmt *>(loopBody(Loop)));
  return F.Found;
}

std::vector<HandSlicedBatch> handSlicedBatches(MigrationContext &Context, const ForStmt *Loop,
                                               std::string *Refusal) {
  const auto *Body = dyn_cast_or_null<CompoundStmt>(Loop->getBody());
  const std::vector<const VarDecl *> Counters = loopCounters(Loop);
  if (!Body || Counters.empty())
    return {};
  std::vector<HandSlicedBatch> Batches;
  std::vector<const Expr *> Recognized;
  for (const Stmt *S : Body->body()) {
    const auto *DS = dyn_cast<DeclStmt>(S);
    const auto *Var = DS && DS->isSingleDecl() ? dyn_cast<VarDecl>(DS->getSingleDecl()) : nullptr;
    const CXXMemberCallExpr *Call =
        Var && Var->getInit() && isTensor(Var->getType()) ? slicingCall(Var->getInit()) : nullptr;
    const auto Range = Call ? firstDimensionRange(Call) : std::nullopt;
    if (!Range)
      continue;
    HandSlicedBatch Batch{Var, Var->getInit(), {}};
    bool ReadsCounter = false;
    for (const Expr *Arg : *Range)
      for (const VarDecl *Read : variablesIn(Arg)) {
        if (llvm::is_contained(Counters, Read))
          ReadsCounter = true;
        else if (!llvm::is_contained(Batch.Sizes, Read))
          Batch.Sizes.push_back(Read);
      }
    if (!ReadsCounter)
      continue;
    Recognized.push_back(Call);
    Batches.push_back(std::move(Batch));
  }
  // Anything else sliced by the counter (a window along time, one row): not batches of rows.
  for (const CountedSlice &Slicing : countedSlices(Context.sourceManager(), Loop))
    if (!llvm::is_contained(Recognized, Slicing.Call))
      return {};
  if (Batches.empty())
    return {};
  // A size that slices the batches and is also read in the loop, or sizes a tensor the loop
  // reads (a hidden state), would not fit a process's share.
  const FunctionDecl *Fn = Context.reach().enclosingFunction(Loop);
  std::vector<const Stmt *> Allowed = {Loop->getInit(), Loop->getCond(), Loop->getInc()};
  for (const HandSlicedBatch &Batch : Batches)
    Allowed.push_back(Batch.Init);
  for (const HandSlicedBatch &Batch : Batches)
    for (const VarDecl *Size : Batch.Sizes) {
      std::vector<const DeclRefExpr *> Reads = readsOutside(Body, Size, Allowed);
      if (Fn && Fn->getBody()) {
        std::vector<const Stmt *> Outside = Allowed;
        Outside.push_back(Loop);
        for (const DeclRefExpr *Other : readsOutside(Fn->getBody(), Size, Outside))
          if (const VarDecl *Shaped = declaredWith(Context, Other);
              Shaped && isTensor(Shaped->getType()) && mentions(Body, Shaped))
            Reads.push_back(Other);
      }
      if (!Reads.empty()) {
        if (Refusal)
          *Refusal = "'" + Size->getNameAsString() +
                     "' sizes the batches this loop slices by hand and is also used at line " +
                     std::to_string(Context.sourceManager().getSpellingLineNumber(
                         Reads.front()->getBeginLoc())) +
                     "; a process's share of a batch would not fit it";
        return {};
      }
    }
  return Batches;
}

bool mentions(const Stmt *S, const VarDecl *Var) {
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

const Expr *assignedValue(const Stmt *S) {
  if (const auto *E = dyn_cast<Expr>(S))
    S = E->IgnoreImplicit();
  if (const auto *BO = dyn_cast<BinaryOperator>(S); BO && BO->getOpcode() == BO_Assign)
    return BO->getRHS();
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(S);
      Op && Op->getOperator() == OO_Equal && Op->getNumArgs() == 2)
    return Op->getArg(1);
  return nullptr;
}

const Expr *assignedTarget(const Stmt *S) {
  if (const auto *E = dyn_cast<Expr>(S))
    S = E->IgnoreImplicit();
  if (const auto *BO = dyn_cast<BinaryOperator>(S); BO && BO->getOpcode() == BO_Assign)
    return BO->getLHS();
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(S);
      Op && Op->getOperator() == OO_Equal && Op->getNumArgs() == 2)
    return Op->getArg(0);
  return nullptr;
}

const Expr *addedValue(const Stmt *S) {
  if (const auto *BO = dyn_cast<BinaryOperator>(S); BO && BO->getOpcode() == BO_AddAssign)
    return BO->getRHS();
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(S);
      Op && Op->getOperator() == OO_PlusEqual && Op->getNumArgs() == 2)
    return Op->getArg(1);
  return nullptr;
}

} // namespace accel::migrate
