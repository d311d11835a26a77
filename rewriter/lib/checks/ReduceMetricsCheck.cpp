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

// Whether E is a tensor's number (`loss.item<float>()`, through casts), nothing more: a value
// computed from it (a running minimum) is not one batch's.
bool isItem(const Expr *E) {
  for (unsigned Guard = 0; E && Guard < 8; ++Guard) {
    E = stripTemporaries(E)->IgnoreParenImpCasts();
    if (const auto *Cast = dyn_cast<ExplicitCastExpr>(E)) {
      E = Cast->getSubExpr();
      continue;
    }
    const auto *Call = dyn_cast<CXXMemberCallExpr>(E);
    return Call && Call->getMethodDecl() && plainName(Call->getMethodDecl()) == "item" &&
           isTensor(Call->getImplicitObjectArgument()->getType());
  }
  return false;
}

// The variable a statement assigns: `v = x` (a count reset before the loop, or set in it).
const VarDecl *assignedTo(const Stmt *S) {
  const Expr *Target = assignedTarget(S);
  if (!Target)
    return nullptr;
  if (const auto *Ref = dyn_cast<DeclRefExpr>(Target->IgnoreParenImpCasts()))
    return dyn_cast<VarDecl>(Ref->getDecl());
  return nullptr;
}

bool isMetricType(const VarDecl *Var) {
  const QualType T = Var->getType().getNonReferenceType();
  return !Var->getType()->isReferenceType() && !T.isConstQualified() &&
         ((T->isArithmeticType() && !T->isBooleanType()) || isTensor(T));
}

// The variables that divide a variable of Numerators in S: `a / b` and `a /= b` give b.
std::set<const VarDecl *> divisorsOf(const Stmt *S, const std::set<const VarDecl *> &Numerators) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const std::set<const VarDecl *> *Numerators;
    std::set<const VarDecl *> Divisors;
    static const VarDecl *varOf(const Expr *E) {
      for (unsigned Guard = 0; E && Guard < 8; ++Guard) {
        E = E->IgnoreParenImpCasts();
        if (const auto *Ref = dyn_cast<DeclRefExpr>(E))
          return dyn_cast<VarDecl>(Ref->getDecl());
        // static_cast<double>(n), double(n)
        if (const auto *Cast = dyn_cast<ExplicitCastExpr>(E)) {
          E = Cast->getSubExpr();
          continue;
        }
        // n.item<double>() of a tensor count
        if (const auto *Call = dyn_cast<CXXMemberCallExpr>(E);
            Call && Call->getMethodDecl() && plainName(Call->getMethodDecl()) == "item") {
          E = Call->getImplicitObjectArgument();
          continue;
        }
        return nullptr;
      }
      return nullptr;
    }
    void note(const Expr *Numerator, const Expr *Denominator) {
      const VarDecl *N = varOf(Numerator), *D = varOf(Denominator);
      if (N && D && N != D && Numerators->count(N))
        Divisors.insert(D);
    }
    bool VisitBinaryOperator(BinaryOperator *BO) {
      if (BO->getOpcode() == BO_Div || BO->getOpcode() == BO_DivAssign)
        note(BO->getLHS(), BO->getRHS());
      return true;
    }
    bool VisitCompoundAssignOperator(CompoundAssignOperator *BO) {
      if (BO->getOpcode() == BO_DivAssign)
        note(BO->getLHS(), BO->getRHS());
      return true;
    }
    bool VisitCXXOperatorCallExpr(CXXOperatorCallExpr *Op) {
      if ((Op->getOperator() == OO_Slash || Op->getOperator() == OO_SlashEqual) &&
          Op->getNumArgs() == 2)
        note(Op->getArg(0), Op->getArg(1));
      return true;
    }
  } F;
  F.Numerators = &Numerators;
  F.TraverseStmt(const_cast<Stmt *>(S));
  return F.Divisors;
}

// `v = accelerator.reduce(v...)`: a previous migration already reduced v here.
bool reducesVariable(const Stmt *S, const VarDecl *Var) {
  // (assignedTarget and assignedValue look through the cleanups of a tensor assignment.)
  const Expr *Target = assignedTarget(S), *Value = assignedValue(S);
  if (!Target)
    return false;
  const auto *Ref = dyn_cast<DeclRefExpr>(Target->IgnoreParenImpCasts());
  if (!Ref || Ref->getDecl() != Var)
    return false;
  const auto *Call = dyn_cast<CallExpr>(stripTemporaries(Value));
  return Call && isAcceleratorMethodCall(Call, "reduce");
}

/// Numbers and tensors that count from the loop's start: declared before the loop in its block,
/// or declared further out and reset in the block before the loop (`batches = 0;` at the top of
/// each epoch).
std::vector<const VarDecl *> candidatesBefore(const std::vector<const Stmt *> &BeforeLoop) {
  std::vector<const VarDecl *> Declared;
  auto addCandidate = [&](const VarDecl *Var) {
    if (Var && isMetricType(Var) && !llvm::is_contained(Declared, Var))
      Declared.push_back(Var);
  };
  for (const Stmt *S : BeforeLoop) {
    if (const auto *DS = dyn_cast<DeclStmt>(S))
      for (const Decl *D : DS->decls())
        addCandidate(dyn_cast<VarDecl>(D));
    addCandidate(assignedTo(S));
  }
  return Declared;
}

/// What a loop's body adds to, and what it sets in any way (a count set from the batch index).
struct LoopWrites : RecursiveASTVisitor<LoopWrites> {
  const CXXForRangeStmt *Loop = nullptr;
  std::set<const VarDecl *> Added, Assigned, Counted, PerBatch, PerSample;
  /// Set to a tensor's number (`last_loss = loss.item<float>()`): the loop's last value.
  std::set<const VarDecl *> LastItem;
  bool VisitStmt(Stmt *S) {
    if (const VarDecl *Var = addedTo(S)) {
      Added.insert(Var);
      const Expr *Value = addedValue(S);
      if (!Value || isa<IntegerLiteral>(Value->IgnoreParenImpCasts()))
        Counted.insert(Var);
      else if (Loop) // a hand-sliced training loop's sums are all reduced
        (takesItemOfBatchResult(Loop, Value, !isa<CompoundStmt>(Loop->getBody())) ||
                 readsTokensNotSamples(Loop, Value)
             ? PerBatch
             : PerSample)
            .insert(Var);
    }
    if (const VarDecl *Var = assignedTo(S)) {
      Assigned.insert(Var);
      if (const Expr *Value = assignedValue(S); Value && isItem(Value))
        LastItem.insert(Var);
    }
    return true;
  }
  bool TraverseLambdaExpr(LambdaExpr *) { return true; }
};

/// The sums to reduce after the loop, and the counts that divide them after it: a ratio printed
/// after the loop is reduced whole, so a count the loop sets that divides a sum it adds to is
/// summed across processes with it, however the loop updates it. An evaluation loop's per-sample
/// sums are gather-for-metrics', not reduced.
std::set<const VarDecl *> toReduce(const LoopWrites &A, bool Evaluation,
                                   const std::vector<const Stmt *> &AfterLoop) {
  std::set<const VarDecl *> Sums;
  for (const VarDecl *Var : A.Added)
    if (!Evaluation || (A.PerBatch.count(Var) && !A.PerSample.count(Var)))
      Sums.insert(Var);
  std::set<const VarDecl *> Reduced = Sums;
  for (const Stmt *S : AfterLoop)
    for (const VarDecl *Divisor : divisorsOf(S, Sums))
      if (A.Assigned.count(Divisor) || (Evaluation && A.Counted.count(Divisor)))
        Reduced.insert(Divisor);
  return Reduced;
}

} // namespace

void ReduceMetricsCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(cxxForRangeStmt(hasParent(compoundStmt().bind("block"))).bind("loop"), this);
  Finder.addMatcher(forStmt(hasParent(compoundStmt().bind("block"))).bind("hand-loop"), this);
}

void ReduceMetricsCheck::check(const MatchFinder::MatchResult &Result) {
  // A loop over a prepared loader, or a training loop whose batches hand-batches splits.
  const auto *Loop = Result.Nodes.getNodeAs<CXXForRangeStmt>("loop");
  const Stmt *LoopStmt = Loop;
  if (const auto *For = Result.Nodes.getNodeAs<ForStmt>("hand-loop")) {
    if (!Context.isEditable(For->getBeginLoc()) || !For->getBody() ||
        !containsBackward(For->getBody()) || handSlicedBatches(Context, For).empty())
      return;
    LoopStmt = For;
  } else if (!iteratesPreparedLoader(Context, Loop)) {
    return;
  }
  const auto *Block = Result.Nodes.getNodeAs<CompoundStmt>("block");
  if (!Context.canEdit(Name, LoopStmt->getSourceRange()))
    return;
  // An evaluation loop (no backward) sums here only its numbers per batch (a loss's item(), a
  // count of tokens) and the counts that divide them; its per-sample metrics are
  // gather-for-metrics'.
  const bool Evaluation = Loop && !containsTrainingStep(Loop->getBody());

  // The block's statements before and after the loop.
  std::vector<const Stmt *> BeforeLoop, AfterLoop;
  bool Seen = false;
  for (const Stmt *S : Block->body()) {
    if (S == LoopStmt)
      Seen = true;
    else
      (Seen ? AfterLoop : BeforeLoop).push_back(S);
  }

  const std::vector<const VarDecl *> Declared = candidatesBefore(BeforeLoop);
  if (Declared.empty())
    return;
  LoopWrites A;
  A.Loop = Loop;
  A.TraverseStmt(const_cast<Stmt *>(loopBody(LoopStmt)));
  // A loop's last number (a loss's item() kept for a print after the loop) is one process's
  // last batch: averaged over the processes, it is the last step's (the mean of the halves of a
  // batch split between two processes is the whole batch's mean loss). So in an evaluation too
  // (sbrhss/d2l_pytorch_cpp's LeNet prints its test loop's last loss): a number taken from
  // gathered outputs is the same everywhere, and its mean is itself.
  std::set<const VarDecl *> Averaged;
  const std::set<const VarDecl *> Reduced = toReduce(A, Evaluation, AfterLoop);
  for (const VarDecl *Var : A.LastItem)
    if (!A.Added.count(Var) && !Reduced.count(Var))
      Averaged.insert(Var);
  insertReductions(LoopStmt, Declared, Reduced, Averaged, AfterLoop);
}

void ReduceMetricsCheck::insertReductions(const Stmt *LoopStmt,
                                          const std::vector<const VarDecl *> &Declared,
                                          const std::set<const VarDecl *> &Reduced,
                                          const std::set<const VarDecl *> &Averaged,
                                          const std::vector<const Stmt *> &AfterLoop) {
  const SourceManager &SM = Context.sourceManager();
  std::string Acc;
  for (const VarDecl *const &Var : Declared) {
    const bool Mean = Averaged.count(Var) != 0;
    if (!Reduced.count(Var) && !Mean)
      continue;
    bool ReadAfter = false, AlreadyReduced = false;
    for (const Stmt *S : AfterLoop) {
      AlreadyReduced = AlreadyReduced || reducesVariable(S, Var);
      ReadAfter = ReadAfter || mentions(S, Var);
    }
    if (!ReadAfter || AlreadyReduced)
      continue;
    if (Acc.empty())
      Acc = accelerator(LoopStmt);
    if (Acc.empty())
      return;
    PendingLoop &Loop = Pending[SM.getFileOffset(SM.getFileLoc(LoopStmt->getBeginLoc()))];
    if (!Loop.Stmt) {
      Loop.Stmt = LoopStmt;
      Loop.Accelerator = Acc;
    }
    Context.markReduced(Var);
    // By its place among the candidates (declared or reset before the loop, in order): the same
    // in a template and its instantiations.
    Loop.Reductions.emplace(static_cast<unsigned>(&Var - Declared.data()),
                            Reduction{Var->getNameAsString(), Mean});
  }
}

void ReduceMetricsCheck::finish() {
  for (const auto &[Offset, Loop] : Pending) {
    const std::string Indent = Context.source().indentation(Loop.Stmt->getBeginLoc());
    std::string Lines;
    for (const auto &[Declared, R] : Loop.Reductions)
      Lines += (Lines.empty() ? "" : "\n" + Indent) + R.Variable + " = " + Loop.Accelerator +
               ".reduce(" + R.Variable + (R.Mean ? ", accel::Reduction::Mean" : "") + ");";
    Context.insertLineAfter(Name, Loop.Stmt, Indent, Lines);
    Context.applied(Name, Loop.Stmt->getBeginLoc());
  }
}

} // namespace accel::migrate
