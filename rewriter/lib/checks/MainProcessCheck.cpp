//===- MainProcessCheck.cpp -----------------------------------------------------------------===//
#include "MainProcessCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"

#include <map>

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

bool isStdout(const Expr *E) {
  // The leftmost operand of a << chain.
  while (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E->IgnoreImplicit())) {
    if (Op->getOperator() != OO_LessLess || Op->getNumArgs() != 2)
      break;
    E = Op->getArg(0);
  }
  const auto *DRE = dyn_cast<DeclRefExpr>(E->IgnoreImplicit());
  return DRE && DRE->getDecl()->getQualifiedNameAsString() == "std::cout";
}

} // namespace

void MainProcessCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(callExpr(callee(functionDecl(hasName("::torch::save")))).bind("save"), this);
  Finder.addMatcher(
      callExpr(callee(functionDecl(hasAnyName("::printf", "::std::printf", "::puts", "::std::puts"))))
          .bind("print"),
      this);
  Finder.addMatcher(cxxOperatorCallExpr(hasOverloadedOperatorName("<<")).bind("print"), this);
}

void MainProcessCheck::check(const MatchFinder::MatchResult &Result) {
  const bool IsSave = Result.Nodes.getNodeAs<CallExpr>("save") != nullptr;
  const auto *Call = IsSave ? Result.Nodes.getNodeAs<CallExpr>("save")
                            : Result.Nodes.getNodeAs<CallExpr>("print");
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call); Op && !isStdout(Op))
    return;
  const Stmt *Statement = asFullStatement(Context, Call);
  if (!Statement || !Context.isEditable(Statement->getBeginLoc()))
    return;
  auto &List = IsSave ? Saves : Prints;
  if (std::find(List.begin(), List.end(), Statement) == List.end())
    List.push_back(Statement);
}

void MainProcessCheck::onEndOfTranslationUnit() {
  // Saving: every process reaches the barrier, the main process writes.
  for (const Stmt *Save : Saves) {
    if (guardedByMainProcess(Context, Save) || !Context.canEdit(Name, Save->getSourceRange()))
      continue;
    const std::string Acc = accelerator(Save);
    if (Acc.empty())
      continue;
    const std::string Guard = "if (" + Acc + ".is_main_process()) ";
    if (isa_and_nonnull<CompoundStmt>(Context.parentStmt(Save))) {
      Context.insert(Name, Save->getBeginLoc(),
                     Acc + ".wait_for_everyone();\n" + Context.indentation(Save->getBeginLoc()) +
                         Guard);
    } else {
      Context.insert(Name, Save->getBeginLoc(), "{ " + Acc + ".wait_for_everyone(); " + Guard);
      Context.insert(Name, Context.afterStatement(Save), " }");
    }
    Context.applied(Name, Save->getBeginLoc());
  }

  // Printing, only in code that trains or evaluates; adjacent prints share one guard.
  std::map<const CompoundStmt *, std::vector<const Stmt *>> ByBlock;
  std::vector<const Stmt *> Single;
  for (const Stmt *Print : Prints) {
    if (guardedByMainProcess(Context, Print) || !Context.canEdit(Name, Print->getSourceRange()))
      continue;
    const FunctionDecl *Fn = Context.enclosingFunction(Print);
    if (!Fn)
      continue;
    const bool TrainingCode = Fn == Context.facts().host() ||
                              Context.functionsNeedingAccelerator().count(Fn) ||
                              containsPreparedLoaderLoop(Context, Fn->getBody());
    if (!TrainingCode)
      continue;
    if (const auto *Block = dyn_cast_or_null<CompoundStmt>(Context.parentStmt(Print)))
      ByBlock[Block].push_back(Print);
    else
      Single.push_back(Print);
  }
  for (const Stmt *Print : Single) {
    const std::string Acc = accelerator(Print);
    if (Acc.empty())
      continue;
    Context.insert(Name, Print->getBeginLoc(), "{ if (" + Acc + ".is_main_process()) ");
    Context.insert(Name, Context.afterStatement(Print), " }");
    Context.applied(Name, Print->getBeginLoc());
  }
  for (auto &[Block, Members] : ByBlock) {
    // Runs of adjacent statements, in source order.
    std::vector<std::vector<const Stmt *>> Runs;
    const Stmt *Previous = nullptr;
    for (const Stmt *Child : Block->body()) {
      const bool IsMember = std::find(Members.begin(), Members.end(), Child) != Members.end();
      if (IsMember && Previous && !Runs.empty() && Runs.back().back() == Previous)
        Runs.back().push_back(Child);
      else if (IsMember)
        Runs.push_back({Child});
      Previous = Child;
    }
    for (const auto &Run : Runs) {
      const std::string Acc = accelerator(Run.front());
      if (Acc.empty())
        continue;
      const std::string Guard = "if (" + Acc + ".is_main_process()) ";
      if (Run.size() == 1) {
        Context.insert(Name, Run.front()->getBeginLoc(), Guard);
      } else {
        // Re-indent the run inside the new block.
        const std::string Indent = Context.indentation(Run.front()->getBeginLoc());
        const std::string Step = Context.indentStep(Run.front()->getBeginLoc());
        const SourceLocation Begin = Run.front()->getBeginLoc();
        const SourceLocation End = Context.afterStatement(Run.back());
        const std::string Original = Context.text(CharSourceRange::getCharRange(Begin, End));
        std::string Body = Indent + Step;
        for (const char C : Original) {
          Body += C;
          if (C == '\n')
            Body += Step;
        }
        // The first line's indentation is already in the file before Begin.
        Context.replace(Name, CharSourceRange::getCharRange(Begin, End),
                        Guard + "{\n" + Body + "\n" + Indent + "}");
      }
      for (const Stmt *Print : Run)
        Context.applied(Name, Print->getBeginLoc());
    }
  }
}

} // namespace accel::migrate
