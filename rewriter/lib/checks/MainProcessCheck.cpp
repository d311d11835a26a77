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
  Finder.addMatcher(callExpr(callee(functionDecl(
                                 hasAnyName("::printf", "::std::printf", "::puts", "::std::puts"))))
                        .bind("print"),
                    this);
  Finder.addMatcher(cxxOperatorCallExpr(hasOverloadedOperatorName("<<")).bind("print"), this);
}

void MainProcessCheck::check(const MatchFinder::MatchResult &Result) {
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

void MainProcessCheck::finish() {
  // Saving: every process reaches the barrier, the main process writes.
  for (const Stmt *Save : Saves) {
    if (guardedByMainProcess(Context, Save) || !Context.canEdit(Name, Save->getSourceRange()))
      continue;
    const std::string Acc = accelerator(Save);
    if (Acc.empty())
      continue;
    const std::string Guard = "if (" + Acc + ".is_main_process()) ";
    if (isa_and_nonnull<CompoundStmt>(Context.reach().parentStmt(Save))) {
      Context.insert(Name, Save->getBeginLoc(),
                     Acc + ".wait_for_everyone();\n" +
                         Context.source().indentation(Save->getBeginLoc()) + Guard);
    } else {
      Context.insert(Name, Save->getBeginLoc(), "{ " + Acc + ".wait_for_everyone(); " + Guard);
      Context.insert(Name, Context.source().afterStatement(Save), " }");
    }
    Context.applied(Name, Save->getBeginLoc());
  }

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
