//===- CreateAcceleratorCheck.cpp -----------------------------------------------------------===//
#include "CreateAcceleratorCheck.h"

#include "clang/AST/Decl.h"
#include "clang/AST/Stmt.h"

using namespace clang;

namespace accel::migrate {

void CreateAcceleratorCheck::finish() {
  for (const FunctionDecl *Fn : Context.reach().functionsNeedingAccelerator())
    bindCurrent(Fn);
  createInHost();
}

void CreateAcceleratorCheck::bindCurrent(const FunctionDecl *Fn) {
  if (Fn->isMain()) {
    warn(Fn->getLocation(), "main uses the accelerator but is not where it is created");
    return;
  }
  const auto *Body = dyn_cast_or_null<CompoundStmt>(Fn->getBody());
  if (!Body || !Context.canEdit(Name, Body->getSourceRange()))
    return;
  const std::string Binding = Context.source().referenceDeclaration(
                                  Body->getLBracLoc(), "accel::Accelerator", "accelerator") +
                              " = " + AcceleratorReach::CurrentAccelerator + ";";
  insertFirstInBody(Body, Binding);
}

void CreateAcceleratorCheck::insertFirstInBody(const CompoundStmt *Body,
                                               const std::string &Statement) {
  const SourceManager &SM = Context.sourceManager();
  const SourceText &Source = Context.source();
  const SourceLocation Open = SM.getFileLoc(Body->getLBracLoc());
  const SourceLocation Close = SM.getFileLoc(Body->getRBracLoc());
  const SourceLocation First =
      Body->body_empty() ? Close : SM.getFileLoc(Body->body_front()->getBeginLoc());
  const auto OnOneLine = [&](SourceLocation A, SourceLocation B) {
    return SM.getFileID(A) == SM.getFileID(B) &&
           SM.getSpellingLineNumber(A) == SM.getSpellingLineNumber(B);
  };
  const auto Blank = [&](SourceLocation From, SourceLocation To) {
    return llvm::StringRef(Source.text(CharSourceRange::getCharRange(From, To))).trim().empty();
  };
  const SourceLocation AfterOpen = Open.getLocWithOffset(1);
  // `{ stmt; }` or `{}` on one line (a lambda, a short helper): opened onto lines of their own,
  // the binding first, so that it does not share a line with the author's code.
  if (OnOneLine(Open, First) && Blank(AfterOpen, First)) {
    const std::string Outer = Source.indentation(Open);
    const std::string Inner = Outer + Source.indentStep(Open);
    Context.replace(Name, CharSourceRange::getCharRange(AfterOpen, First),
                    "\n" + Inner + Statement + "\n" + (Body->body_empty() ? Outer : Inner));
    if (!Body->body_empty()) {
      const SourceLocation AfterLast = Source.afterStatement(Body->body_back());
      if (AfterLast.isValid() && OnOneLine(AfterLast, Close) && Blank(AfterLast, Close))
        Context.replace(Name, CharSourceRange::getCharRange(AfterLast, Close), "\n" + Outer);
    }
    Context.applied(Name, Body->getLBracLoc());
    return;
  }
  const std::string Indent = Body->body_empty() ? Source.indentation(Open) + Source.indentStep(Open)
                                                : Source.indentation(First);
  // Verbatim: indented as the body's first line is, which the formatter's guess of the file's
  // indentation step may not match.
  Context.insertVerbatim(Name, Source.afterTrailingComment(AfterOpen), "\n" + Indent + Statement);
  Context.applied(Name, Body->getLBracLoc());
}

void CreateAcceleratorCheck::createInHost() {
  // The host creates it when it uses it, and when any function of the program binds it: that
  // function's Accelerator::current() needs one alive.
  const FunctionDecl *Host = Context.facts().host();
  const bool Needed = Context.reach().hostNeedsAccelerator() ||
                      !Context.reach().functionsNeedingAccelerator().empty() ||
                      Context.options().OtherFiles.BindsAccelerator;
  if (!Host || !Needed || !Context.facts().acceleratorIn(Host).empty())
    return;
  const auto *Body = dyn_cast_or_null<CompoundStmt>(Host->getBody());
  if (!Body || !Context.canEdit(Name, Body->getSourceRange()))
    return;
  std::string Options;
  const MigrateOptions &Opts = Context.options();
  if (Opts.MixedPrecision)
    Options += ".mixed_precision(\"" + *Opts.MixedPrecision + "\")";
  if (Opts.GradientAccumulationSteps)
    Options +=
        ".gradient_accumulation_steps(" + std::to_string(*Opts.GradientAccumulationSteps) + ")";
  const std::string Declaration =
      Options.empty()
          ? "accel::Accelerator accelerator;"
          : "accel::Accelerator accelerator(accel::AcceleratorOptions()" + Options + ");";
  insertFirstInBody(Body, Declaration);
}

} // namespace accel::migrate
