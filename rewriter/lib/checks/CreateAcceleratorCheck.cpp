//===- CreateAcceleratorCheck.cpp -----------------------------------------------------------===//
#include "CreateAcceleratorCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"

using namespace clang;

namespace accel::migrate {

void CreateAcceleratorCheck::onEndOfTranslationUnit() {
  // Functions other than the host get the accelerator as their first parameter, and their
  // callers pass theirs, which may make the callers need one in turn: a worklist.
  for (size_t I = 0; I < Context.functionsNeedingAccelerator().size(); ++I)
    addParameter(Context.functionsNeedingAccelerator()[I]);
  createInHost();
}

void CreateAcceleratorCheck::addParameter(const FunctionDecl *Fn) {
  if (Fn->isMain()) {
    warn(Fn->getLocation(), "main uses the accelerator but is not where it is created");
    return;
  }
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Fn); Method && !Method->isStatic()) {
    warn(Fn->getLocation(),
         llvm::Twine("method '") + Fn->getNameAsString() +
             "' uses the accelerator; give its class an accel::Accelerator& member (or "
             "parameter) named 'accelerator' by hand");
    return;
  }
  // Every declaration of the function we may edit gets the parameter.
  bool Edited = false;
  for (const FunctionDecl *Decl : Fn->redecls()) {
    const FunctionTypeLoc Loc = Decl->getFunctionTypeLoc();
    if (!Loc || !Context.isEditable(Loc.getLParenLoc()))
      continue;
    const std::string Parameter =
        Context.referenceDeclaration(Loc.getLParenLoc(), "accel::Accelerator", "accelerator") +
        (Decl->getNumParams() > 0 ? ", " : "");
    Context.insert(Name, Loc.getLParenLoc().getLocWithOffset(1), Parameter);
    Context.applied(Name, Loc.getLParenLoc());
    Edited = true;
  }
  if (!Edited)
    return;
  const auto &Calls = Context.facts().callsTo(Fn);
  if (Calls.empty())
    warn(Fn->getLocation(),
         llvm::Twine("'") + Fn->getNameAsString() +
             "' now takes the accelerator as its first parameter; pass it at its calls in "
             "other files");
  for (const CallExpr *Call : Calls) {
    if (!Context.canEdit(Name, Call->getSourceRange()))
      continue;
    const std::string Acc = accelerator(Call);
    if (Acc.empty())
      continue;
    const std::vector<const Expr *> Args = explicitArgs(Call);
    if (Args.empty())
      Context.insert(Name, Call->getRParenLoc(), Acc);
    else
      Context.insert(Name, Args.front()->getBeginLoc(), Acc + ", ");
  }
}

void CreateAcceleratorCheck::createInHost() {
  const FunctionDecl *Host = Context.facts().host();
  if (!Host || !Context.hostNeedsAccelerator() ||
      !Context.facts().acceleratorIn(Host).empty())
    return;
  const auto *Body = dyn_cast_or_null<CompoundStmt>(Host->getBody());
  if (!Body || !Context.canEdit(Name, Body->getSourceRange()))
    return;
  std::string Options;
  const MigrateOptions &Opts = Context.options();
  if (Opts.MixedPrecision)
    Options += ".mixed_precision(\"" + *Opts.MixedPrecision + "\")";
  if (Opts.GradientAccumulationSteps)
    Options += ".gradient_accumulation_steps(" + std::to_string(*Opts.GradientAccumulationSteps) + ")";
  const std::string Declaration =
      Options.empty() ? "accel::Accelerator accelerator;"
                      : "accel::Accelerator accelerator(accel::AcceleratorOptions()" + Options + ");";
  const std::string Indent = Body->body_empty()
                                 ? Context.indentStep(Body->getBeginLoc())
                                 : Context.indentation(Body->body_front()->getBeginLoc());
  Context.insert(Name, Body->getLBracLoc().getLocWithOffset(1), "\n" + Indent + Declaration);
  Context.applied(Name, Body->getLBracLoc());
}

} // namespace accel::migrate
