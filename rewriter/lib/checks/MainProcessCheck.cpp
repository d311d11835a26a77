//===- MainProcessCheck.cpp -----------------------------------------------------------------===//
#include "MainProcessCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Lex/Lexer.h"

#include <map>

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

// The leftmost operand of a << chain when it is std::cout, or null.
const DeclRefExpr *stdoutOperand(const Stmt *S) {
  const auto *E = dyn_cast<Expr>(S);
  if (!E)
    return nullptr;
  while (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E->IgnoreImplicit())) {
    if (Op->getOperator() != OO_LessLess || Op->getNumArgs() != 2)
      break;
    E = Op->getArg(0);
  }
  const auto *DRE = dyn_cast<DeclRefExpr>(E->IgnoreImplicit());
  return DRE && DRE->getDecl()->getQualifiedNameAsString() == "std::cout" ? DRE : nullptr;
}

bool isStdout(const Expr *E) { return stdoutOperand(E) != nullptr; }

} // namespace

void MainProcessCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(callExpr(callee(functionDecl(hasName("::torch::save")))).bind("save"), this);
  // A TorchScript module saves itself: `net.save(path)`.
  Finder.addMatcher(
      cxxMemberCallExpr(
          callee(cxxMethodDecl(hasName("save"), ofClass(hasName("::torch::jit::Module")))))
          .bind("save"),
      this);
  Finder.addMatcher(callExpr(callee(functionDecl(hasName("::torch::load")))).bind("load"), this);
  Finder.addMatcher(callExpr(callee(functionDecl(
                                 hasAnyName("::printf", "::std::printf", "::puts", "::std::puts"))))
                        .bind("print"),
                    this);
  Finder.addMatcher(cxxOperatorCallExpr(hasOverloadedOperatorName("<<")).bind("print"), this);
}

void MainProcessCheck::check(const MatchFinder::MatchResult &Result) {
  if (const auto *Load = Result.Nodes.getNodeAs<CallExpr>("load")) {
    const Stmt *Statement = asFullStatement(Context, Load);
    if (Statement && Context.isEditable(Statement->getBeginLoc()) &&
        std::find(Loads.begin(), Loads.end(), Statement) == Loads.end())
      Loads.push_back(Statement);
    return;
  }
  const bool IsSave = Result.Nodes.getNodeAs<CallExpr>("save") != nullptr;
  const auto *Call =
      IsSave ? Result.Nodes.getNodeAs<CallExpr>("save") : Result.Nodes.getNodeAs<CallExpr>("print");
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call); Op && !isStdout(Op))
    return;
  const Stmt *Statement = asFullStatement(Context, Call);
  if (!Statement || !Context.isEditable(Statement->getBeginLoc()))
    return;
  if (IsSave) {
    if (std::find(Saves.begin(), Saves.end(), Statement) == Saves.end())
      Saves.push_back(Statement);
    return;
  }
  const std::pair<const Stmt *, const CallExpr *> Print(
      Statement, isa<CXXOperatorCallExpr>(Call) ? nullptr : Call);
  if (std::find(Prints.begin(), Prints.end(), Print) == Prints.end())
    Prints.push_back(Print);
}

void MainProcessCheck::replaceStream(const Expr *Stream, const std::string &Acc) {
  const std::string Wrapped =
      Acc + ".main_process_only(" + Context.source().text(Stream->getSourceRange()) + ")";
  // `std::cout << a\n          << b;`: the longer first operand would leave the author's `<<`
  // lines misaligned, so the rest of the first line moves down to start where they start.
  const SourceManager &SM = Context.sourceManager();
  const SourceLocation End =
      Lexer::getLocForEndOfToken(Stream->getEndLoc(), 0, SM, Context.ast().getLangOpts());
  const auto [FID, Offset] = SM.getDecomposedLoc(End);
  const StringRef Buffer = SM.getBufferData(FID);
  const size_t Operator = Buffer.find_first_not_of(" \t", Offset);
  const size_t LineEnd = Buffer.find('\n', Offset);
  if (Operator != StringRef::npos && LineEnd != StringRef::npos && Operator < LineEnd &&
      Buffer.substr(Operator).startswith("<<")) {
    const size_t NextText = Buffer.find_first_not_of(" \t", LineEnd + 1);
    if (NextText != StringRef::npos && Buffer.substr(NextText).startswith("<<") &&
        Buffer.substr(LineEnd + 1, NextText - LineEnd - 1).find('\n') == StringRef::npos) {
      Context.replace(
          Name,
          CharSourceRange::getCharRange(Stream->getBeginLoc(),
                                        End.getLocWithOffset(static_cast<int>(Operator - Offset))),
          Wrapped + "\n" + Buffer.substr(LineEnd + 1, NextText - LineEnd - 1).str());
      return;
    }
  }
  Context.replace(Name, Stream->getSourceRange(), Wrapped);
}

bool MainProcessCheck::reachesAccelerator(const FunctionDecl *Fn) {
  if (!Fn)
    return false;
  return Fn == Context.facts().host() || !Context.facts().acceleratorIn(Fn).empty() ||
         Context.reach().functionsNeedingAccelerator().count(Fn);
}

void MainProcessCheck::guardSave(const Stmt *Save) {
  std::string Guard, Barrier;
  const FunctionDecl *Fn = Context.reach().enclosingFunction(Save);
  if (!reachesAccelerator(Fn)) {
    // Code the accelerator does not reach (a model's own save method, a helper that only saves)
    // asks the process's state: no parameter, member or constructor change for it.
    Guard = "if (accel::state().is_main_process()) ";
  } else {
    const std::string Acc = accelerator(Save);
    if (Acc.empty())
      return;
    Guard = "if (" + Acc + ".is_main_process()) ";
    // Every process reaches the barrier, the main process writes. A barrier is a collective:
    // under a condition that may hold on some processes only (a per-process best accuracy), it
    // would wait for the others forever, so there the save is guarded alone.
    if (!underCondition(Context, Save))
      Barrier = Acc + ".wait_for_everyone();";
  }
  if (isa_and_nonnull<CompoundStmt>(Context.reach().parentStmt(Save))) {
    Context.insert(Name, Save->getBeginLoc(),
                   Barrier.empty() ? Guard
                                   : Barrier + "\n" +
                                         Context.source().indentation(Save->getBeginLoc()) + Guard);
  } else {
    Context.insert(Name, Save->getBeginLoc(),
                   "{ " + (Barrier.empty() ? "" : Barrier + " ") + Guard);
    Context.insert(Name, Context.source().afterStatement(Save), " }");
  }
  Context.applied(Name, Save->getBeginLoc());
}

void MainProcessCheck::waitBeforeLoad(const Stmt *Load) {
  // A file the main process has just written is read by every process only once it is written:
  // the barrier goes before a torch::load in code that reaches the accelerator, outside any
  // condition (where all processes reach it), unless one is there already.
  const FunctionDecl *Fn = Context.reach().enclosingFunction(Load);
  if (!reachesAccelerator(Fn) || underCondition(Context, Load) ||
      !isa_and_nonnull<CompoundStmt>(Context.reach().parentStmt(Load)) ||
      !Context.canEdit(Name, Load->getSourceRange()))
    return;
  const auto *Block = cast<CompoundStmt>(Context.reach().parentStmt(Load));
  const Stmt *Previous = nullptr;
  for (const Stmt *Child : Block->body()) {
    if (Child == Load)
      break;
    Previous = Child;
  }
  if (Previous && containsAcceleratorCall(Previous, "wait_for_everyone"))
    return;
  const std::string Acc = accelerator(Load);
  if (Acc.empty())
    return;
  Context.insertLineBefore(Name, Load->getBeginLoc(), Acc + ".wait_for_everyone();");
  Context.applied(Name, Load->getBeginLoc());
}

void MainProcessCheck::finish() {
  for (const Stmt *Save : Saves)
    if (!guardedByMainProcess(Context, Save) && Context.canEdit(Name, Save->getSourceRange()))
      guardSave(Save);
  // Loads wait for saves only in a program that saves, here or in another of its files.
  if (!Saves.empty())
    Context.facts().noteSaves();
  if (!Saves.empty() || Context.options().OtherFiles.Saves)
    for (const Stmt *Load : Loads)
      waitBeforeLoad(Load);

  // Printing, only in code that trains or evaluates. Nothing is re-indented or guarded: a stream
  // statement writes to `accelerator.main_process_only(std::cout)` instead of std::cout (the same
  // stream, formatting state included, on the main process; a discarding one elsewhere), and
  // printf/puts become the accelerator's, which print on the main process only. Either way the
  // arguments are still evaluated on every process: an evaluation called among them gathers.
  for (const auto &[Print, PrintCall] : Prints) {
    if (guardedByMainProcess(Context, Print) || !Context.canEdit(Name, Print->getSourceRange()))
      continue;
    const FunctionDecl *Fn = Context.reach().enclosingFunction(Print);
    if (!Fn)
      continue;
    const bool TrainingCode = Fn == Context.facts().host() ||
                              Context.reach().functionsNeedingAccelerator().count(Fn) ||
                              containsPreparedLoaderLoop(Context, Fn->getBody());
    if (!TrainingCode)
      continue;
    const Expr *Stream = PrintCall ? nullptr : stdoutOperand(Print);
    const auto *Callee =
        PrintCall ? dyn_cast<DeclRefExpr>(PrintCall->getCallee()->IgnoreImplicit()) : nullptr;
    if (!Stream && !Callee)
      continue;
    const std::string Acc = accelerator(Print);
    if (Acc.empty())
      continue;
    if (Stream)
      replaceStream(Stream, Acc);
    else
      Context.replace(Name, Callee->getSourceRange(),
                      Acc + "." + Callee->getDecl()->getNameAsString());
    Context.applied(Name, Print->getBeginLoc());
  }
}

} // namespace accel::migrate
