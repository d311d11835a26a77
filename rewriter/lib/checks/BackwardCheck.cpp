//===- BackwardCheck.cpp --------------------------------------------------------------------===//
#include "BackwardCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

void BackwardCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(cxxMemberCallExpr(callee(cxxMethodDecl(hasName("backward")))).bind("call"),
                    this);
  Finder.addMatcher(cxxRecordDecl(isDefinition()).bind("class"), this);
}

void BackwardCheck::check(const MatchFinder::MatchResult &Result) {
  if (const auto *Class = Result.Nodes.getNodeAs<CXXRecordDecl>("class")) {
    if (Context.isEditable(Class->getLocation()) &&
        isClassOrDerived(QualType(Class->getTypeForDecl(), 0), "torch::autograd::Function") &&
        !Class->isDependentContext())
      warn(Class->getLocation(),
           llvm::Twine("custom autograd function '") + Class->getName() +
               "' is left as written; check its backward under mixed precision (fp16 gradients "
               "arrive scaled, bf16 inputs may arrive in bf16)");
    return;
  }
  const auto *Call = Result.Nodes.getNodeAs<CXXMemberCallExpr>("call");
  const CXXMethodDecl *Method = Call->getMethodDecl();
  if (!isTensor(QualType(Method->getParent()->getTypeForDecl(), 0)) ||
      !Context.canEdit(Name, Call->getSourceRange()))
    return;
  const std::vector<const Expr *> Args = explicitArgs(Call);
  if (Args.size() > 3) {
    warn(Call->getBeginLoc(), "backward() with 'inputs' is left as it is; accelerator.backward "
                              "takes (loss, gradient, retain_graph, create_graph)");
    return;
  }
  const std::string Acc = accelerator(Call);
  if (Acc.empty())
    return;
  // `(loss / k).backward()` passes `loss / k`: the call's own parentheses are enough.
  const Expr *Loss = Call->getImplicitObjectArgument()->IgnoreImplicit();
  if (const auto *Parens = dyn_cast<ParenExpr>(Loss))
    Loss = Parens->getSubExpr();
  std::string Replacement = Acc + ".backward(" + Context.source().text(Loss->getSourceRange());
  if (!Args.empty())
    Replacement += ", " + argumentsText(Context, Args, 0);
  Context.replace(Name, Call->getSourceRange(), Replacement + ")");
  Context.applied(Name, Call->getBeginLoc());
}

} // namespace accel::migrate
