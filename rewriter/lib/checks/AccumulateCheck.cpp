//===- AccumulateCheck.cpp ------------------------------------------------------------------===//
#include "AccumulateCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Lex/Lexer.h"

#include <set>

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

// The models a loop body uses: prepared model variables and members, and model parameters of the
// function (a training function's model parameter is bound to the prepared model at its call);
// and, apart, the models it uses that are not prepared (in declaration order of first use).
struct ModelsUsed {
  std::vector<std::string> Prepared, Unprepared;
  /// Variables named in the body whose (known) type is no model: in a template, the same name
  /// may be a model in one instantiation and not in another.
  std::set<std::string> NotModels;
};

ModelsUsed modelsUsedIn(MigrationContext &Context, const Stmt *Body) {
  struct Finder : RecursiveASTVisitor<Finder> {
    MigrationContext *Context;
    ModelsUsed Used;
    void note(const std::string &Name, bool Prepared) {
      auto &Names = Prepared ? Used.Prepared : Used.Unprepared;
      if (std::find(Names.begin(), Names.end(), Name) == Names.end())
        Names.push_back(Name);
    }
    bool VisitDeclRefExpr(DeclRefExpr *DRE) {
      const auto *Var = dyn_cast<VarDecl>(DRE->getDecl());
      if (Var && !Var->getType()->isDependentType() && !isModule(Var->getType()))
        Used.NotModels.insert(Var->getNameAsString());
      if (!Var || !isModule(Var->getType()) || isLossModule(Var->getType()))
        return true;
      note(Var->getNameAsString(), isa<ParmVarDecl>(Var) || Context->facts().isPreparedModel(Var));
      return true;
    }
    // A model member of the class whose method this is (`model_->forward(x)`).
    bool VisitMemberExpr(MemberExpr *ME) {
      const auto *Field = dyn_cast<FieldDecl>(ME->getMemberDecl());
      if (!Field || !isa<CXXThisExpr>(ME->getBase()->IgnoreParenImpCasts()) ||
          !isModule(Field->getType()) || isLossModule(Field->getType()))
        return true;
      note(Field->getNameAsString(), Context->facts().isPreparedModel(Field));
      return true;
    }
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  } F;
  F.Context = &Context;
  F.TraverseStmt(const_cast<Stmt *>(Body));
  return F.Used;
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
  if (!Decl || !Decl->isSingleDecl() || !isa<VarDecl>(Decl->getSingleDecl()))
    return false;
  const Expr *Init = cast<VarDecl>(Decl->getSingleDecl())->getInit();
  return containsAcceleratorCall(Init, "accumulate") ||
         containsAcceleratorCall(Init, "accumulate_until");
}

// `optimizer.step()` / `optimizer->step()` on an optimizer (by value, reference or pointer).
bool containsOptimizerStep(const Stmt *S) {
  struct Finder : RecursiveASTVisitor<Finder> {
    bool Found = false;
    bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
      const CXXMethodDecl *Method = Call->getMethodDecl();
      Found = Found || (Method && plainName(Method) == "step" &&
                        isOptimizer(QualType(Method->getParent()->getTypeForDecl(), 0)));
      return !Found;
    }
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  } F;
  F.TraverseStmt(const_cast<Stmt *>(S));
  return F.Found;
}

// The variables S declares or modifies: assignments, compound assignments, increments and
// decrements.
std::set<const VarDecl *> modifiedIn(const Stmt *S) {
  struct Finder : RecursiveASTVisitor<Finder> {
    std::set<const VarDecl *> Vars;
    bool VisitVarDecl(VarDecl *Var) {
      Vars.insert(Var);
      return true;
    }
    void note(const Expr *E) {
      if (const auto *Ref = dyn_cast<DeclRefExpr>(E->IgnoreParenImpCasts()))
        if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl()))
          Vars.insert(Var);
    }
    bool VisitUnaryOperator(UnaryOperator *UO) {
      if (UO->isIncrementDecrementOp())
        note(UO->getSubExpr());
      return true;
    }
    bool VisitBinaryOperator(BinaryOperator *BO) {
      if (BO->isAssignmentOp())
        note(BO->getLHS());
      return true;
    }
  } F;
  F.TraverseStmt(const_cast<Stmt *>(S));
  return F.Vars;
}

std::set<const VarDecl *> readIn(const Stmt *S) {
  struct Finder : RecursiveASTVisitor<Finder> {
    std::set<const VarDecl *> Vars;
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl()))
        Vars.insert(Var);
      return true;
    }
  } F;
  F.TraverseStmt(const_cast<Stmt *>(S));
  return F.Vars;
}

/// The training loop's own accumulation: `if ((i + 1) % k == 0) { optimizer.step(); ... }` in
/// its body, with backward() outside that if.
struct HandAccumulation {
  const IfStmt *Step = nullptr;
  /// The condition as a value read before the step's if: `++i % 4 == 0` reads `(i + 1) % 4 == 0`.
  std::string Condition;
  /// The body's statement the scope goes after (null: the body's start).
  const Stmt *After = nullptr;
  /// Why it cannot be moved to the scope (empty when it can).
  std::string Why;
};

HandAccumulation findHandAccumulation(MigrationContext &Context, const CompoundStmt *Body) {
  HandAccumulation Found;
  for (const Stmt *S : Body->body()) {
    const auto *If = dyn_cast<IfStmt>(S);
    if (If && containsOptimizerStep(If->getThen()) && !containsBackward(If->getThen())) {
      Found.Step = If;
      break;
    }
  }
  if (!Found.Step)
    return Found;
  const Expr *Cond = Found.Step->getCond();
  // The condition's text, with its own increments read as values: `++i` is `(i + 1)`, `i++` is
  // `i` (the if does the increment still).
  struct Increments : RecursiveASTVisitor<Increments> {
    std::vector<const UnaryOperator *> Ops;
    bool Other = false;
    bool VisitUnaryOperator(UnaryOperator *UO) {
      if (UO->isIncrementOp() && isa<DeclRefExpr>(UO->getSubExpr()->IgnoreParenImpCasts()))
        Ops.push_back(UO);
      else if (UO->isDecrementOp())
        Other = true;
      return true;
    }
    bool VisitBinaryOperator(BinaryOperator *BO) {
      Other = Other || BO->isAssignmentOp();
      return true;
    }
    bool VisitCallExpr(CallExpr *) {
      Other = true;
      return true;
    }
  } Inc;
  Inc.TraverseStmt(const_cast<Expr *>(Cond));
  if (Inc.Other) {
    Found.Why = "its condition calls a function or assigns";
    return Found;
  }
  const SourceManager &SM = Context.sourceManager();
  const SourceRange CondRange = Cond->getSourceRange();
  std::string Text;
  SourceLocation From = CondRange.getBegin();
  for (const UnaryOperator *Op : Inc.Ops) {
    Text += Context.source().text(CharSourceRange::getCharRange(From, Op->getBeginLoc()));
    const std::string Var = Context.source().text(Op->getSubExpr()->getSourceRange());
    Text += Op->isPrefix() ? "(" + Var + " + 1)" : Var;
    From = Lexer::getLocForEndOfToken(Op->getEndLoc(), 0, SM, Context.ast().getLangOpts());
  }
  Text += Context.source().text(CharSourceRange::getCharRange(
      From, Lexer::getLocForEndOfToken(CondRange.getEnd(), 0, SM, Context.ast().getLangOpts())));
  Found.Condition = Text;
  // The scope opens after the last statement before the if that changes what the condition
  // reads, and must still open before backward().
  const std::set<const VarDecl *> Read = readIn(Cond);
  for (const Stmt *S : Body->body()) {
    if (S == Found.Step)
      break;
    const std::set<const VarDecl *> Modified = modifiedIn(S);
    if (llvm::any_of(Read, [&](const VarDecl *V) { return Modified.count(V) != 0; }))
      Found.After = S;
  }
  bool AfterSeen = Found.After == nullptr;
  for (const Stmt *S : Body->body()) {
    if (S == Found.Step)
      break;
    if (!AfterSeen) {
      if (containsBackward(S)) {
        Found.Why = "what its condition reads changes after backward()";
        return Found;
      }
      AfterSeen = S == Found.After;
    }
  }
  return Found;
}

// Tensors a loop slices its batches from by hand, by its counter: `data.narrow(1, i, seq)`,
// `x.slice(0, i, i + batch)`, `x.index({Slice(i, i + batch)})`, `x[i]`. Declared outside the
// loop, so that one line before it can give each process its share.
std::vector<const VarDecl *> handSlicedTensors(const SourceManager &SM, const Stmt *Loop) {
  std::vector<const VarDecl *> Sliced;
  for (const CountedSlice &Slice : countedSlices(SM, Loop))
    if (!llvm::is_contained(Sliced, Slice.Source))
      Sliced.push_back(Slice.Source);
  return Sliced;
}

} // namespace

void AccumulateCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(cxxForRangeStmt().bind("loop"), this);
  Finder.addMatcher(
      stmt(anyOf(forStmt(), whileStmt(), doStmt(), cxxForRangeStmt())).bind("any-loop"), this);
}

void AccumulateCheck::check(const MatchFinder::MatchResult &Result) {
  if (const auto *Loop = Result.Nodes.getNodeAs<Stmt>("any-loop"))
    return reportUnprovenLoop(Loop);
  noteTrainingLoop(Result.Nodes.getNodeAs<CXXForRangeStmt>("loop"));
}

void AccumulateCheck::reportUnprovenLoop(const Stmt *Loop) {
  // backward() in a loop that is not over a prepared loader: which loop trains is unclear.
  const auto *RangeFor = dyn_cast<CXXForRangeStmt>(Loop);
  const Stmt *Body =
      RangeFor && iteratesPreparedLoader(Context, RangeFor) ? nullptr : loopBody(Loop);
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
  warn(Loop->getBeginLoc(),
       "backward() is called in a loop that does not iterate a prepared data loader, so it "
       "cannot be proven to be the training loop; open 'auto step = "
       "accelerator.accumulate(model);' at the top of the training step by hand" +
           unprovenLoopData(Loop));
}

std::string AccumulateCheck::unprovenLoopData(const Stmt *Loop) {
  // Batches sliced by hand (or read any other way than from a prepared loader) are the same on
  // every process: the job then trains N times on the whole data set, which a user who launched
  // N processes to share the work would not expect, and nothing else would tell them.
  // When the loop slices its batches from tensors by its counter, the fix is one line before
  // it: each process keeps its share of the batch dimension (the first).
  // Batches sliced along the first dimension are hand-batches' to split, in the loop.
  const auto *For = dyn_cast<ForStmt>(Loop);
  std::string Refused;
  if (For && !handSlicedBatches(Context, For, &Refused).empty())
    return "; each process takes its share of every batch the loop slices "
           "(accel-migrate-hand-batches)";
  if (!Refused.empty())
    return "; every process trains on all of the data (its batches are sliced by hand: see "
           "accel-migrate-hand-batches)";
  std::string Share;
  const FunctionDecl *Fn = Context.reach().enclosingFunction(Loop);
  const std::string Acc = Fn ? Context.facts().acceleratorIn(Fn) : "";
  for (const VarDecl *Sliced : handSlicedTensors(Context.sourceManager(), Loop)) {
    const std::string Name = Sliced->getName().str();
    Share += (Share.empty() ? "" : " ") + Name + " = " + (Acc.empty() ? "accelerator" : Acc) +
             ".split_between_processes(" + Name + ");";
  }
  if (Share.empty())
    return "; unless its batches come from a prepared data loader, every process trains on all "
           "of the data (take this process's share with accelerator.split_between_processes; "
           "batches drawn from environments or a random generator need each process's own: seed "
           "them with seed + accelerator.process_index())";
  return "; unless its batches come from a prepared data loader, every process trains on all of "
         "the data (to give each process its share of the batch dimension, add before the "
         "loop: '" +
         Share + "')";
}

std::string AccumulateCheck::modelsToAccumulate(const TrainingLoop &Seen) {
  const CXXForRangeStmt *Loop = Seen.Loop;
  std::string Models;
  // A name that is a model in one instantiation and not in another cannot be accumulate()'s
  // argument in the template they share.
  for (const std::string &Model : Seen.Prepared)
    if (!Seen.NotModels.count(Model))
      Models += (Models.empty() ? "" : ", ") + Model;
  // What is true of the loop: a model it trains that is not prepared never has its gradients
  // averaged, whatever accumulate() is told (in any instantiation).
  for (const std::string &Model : Seen.Unprepared)
    if (llvm::find(Seen.Prepared, Model) == Seen.Prepared.end())
      warn(
          Loop->getBeginLoc(),
          "model '" + Model +
              "' is used in this training loop but was not prepared: no "
              "optimizer seen here is built from its parameters(), so accel-migrate cannot tell it "
              "trains; if it does, prepare it where it is created (accelerator.prepare(" +
              Model + ")), or its gradients are never averaged across processes");
  if (Models.empty() && Seen.Unprepared.empty())
    warn(Loop->getBeginLoc(), "no model is used in this training loop by name, so accumulate() "
                              "cannot skip its gradient all-reduce on micro-steps; name the "
                              "model: accelerator.accumulate(model)");
  return Models;
}

void AccumulateCheck::noteTrainingLoop(const CXXForRangeStmt *Loop) {
  if (!iteratesPreparedLoader(Context, Loop) || !containsBackward(Loop->getBody()))
    return;
  const auto *Body = dyn_cast<CompoundStmt>(Loop->getBody());
  if (!Body) {
    if (Context.isEditable(Loop->getBeginLoc()))
      warn(Loop->getBeginLoc(), "the training loop's body is a single statement; put it in "
                                "braces and open 'auto step = accelerator.accumulate(model);'");
    return;
  }
  if (llvm::any_of(Body->body(), isAccumulateScope))
    return;
  if (!Context.canEdit(Name, Body->getSourceRange()))
    return;
  const std::string Acc = accelerator(Loop);
  if (Acc.empty())
    return;
  TrainingLoop &Seen = TrainingLoops[Context.sourceManager().getFileOffset(
      Context.sourceManager().getFileLoc(Body->getLBracLoc()))];
  if (!Seen.Loop) {
    Seen.Loop = Loop;
    Seen.Accelerator = Acc;
  }
  const ModelsUsed Used = modelsUsedIn(Context, Body);
  for (const std::string &Model : Used.Prepared)
    if (llvm::find(Seen.Prepared, Model) == Seen.Prepared.end())
      Seen.Prepared.push_back(Model);
  for (const std::string &Model : Used.Unprepared)
    if (llvm::find(Seen.Unprepared, Model) == Seen.Unprepared.end())
      Seen.Unprepared.push_back(Model);
  Seen.NotModels.insert(Used.NotModels.begin(), Used.NotModels.end());
}

void AccumulateCheck::finish() {
  for (const auto &[Offset, Seen] : TrainingLoops)
    migrateTrainingLoop(Seen);
}

void AccumulateCheck::migrateTrainingLoop(const TrainingLoop &Seen) {
  const CXXForRangeStmt *Loop = Seen.Loop;
  const auto *Body = cast<CompoundStmt>(Loop->getBody());
  const std::string &Acc = Seen.Accelerator;
  const std::string Models = modelsToAccumulate(Seen);
  const FunctionDecl *Fn = Context.reach().enclosingFunction(Loop);
  const std::string Var = Fn && declaresName(Fn, "step") ? "accumulate_step" : "step";
  // A loop that accumulates by hand keeps its own count: its gradients are averaged across
  // processes only on the micro-batches that step (accumulate() would sync every batch here).
  const HandAccumulation Hand = findHandAccumulation(Context, Body);
  if (Hand.Step && !Hand.Why.empty())
    warn(Hand.Step->getBeginLoc(),
         "this loop accumulates gradients by hand, but its step condition cannot be read before "
         "backward() (" +
             Hand.Why +
             "); gradients are averaged across processes on every "
             "micro-batch; open 'auto step = accelerator.accumulate_until(<does this batch step>, "
             "model);' at the top of the loop by hand");
  const std::string Scope = Hand.Step && Hand.Why.empty()
                                ? "auto " + Var + " = " + Acc + ".accumulate_until(" +
                                      Hand.Condition + (Models.empty() ? "" : ", " + Models) + ");"
                                : "auto " + Var + " = " + Acc + ".accumulate(" + Models + ");";
  if (Hand.Step && Hand.Why.empty() && Hand.After) {
    Context.insertLineAfter(Name, Hand.After,
                            Context.source().indentation(Hand.After->getBeginLoc()), Scope);
  } else {
    const std::string Indent =
        Body->body_empty() ? Context.source().indentation(Loop->getBeginLoc()) +
                                 Context.source().indentStep(Loop->getBeginLoc())
                           : Context.source().indentation(Body->body_front()->getBeginLoc());
    Context.insert(Name,
                   Context.source().afterTrailingComment(Body->getLBracLoc().getLocWithOffset(1)),
                   "\n" + Indent + Scope);
  }
  Context.applied(Name, Loop->getBeginLoc());
}

} // namespace accel::migrate
