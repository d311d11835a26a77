//===- ClipGradCheck.cpp --------------------------------------------------------------------===//
#include "ClipGradCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/Lex/Lexer.h"

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

void ClipGradCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(callExpr(callee(functionDecl(hasAnyName("::torch::nn::utils::clip_grad_norm_",
                                                            "::torch::nn::utils::clip_grad_value_"))
                                        .bind("fn")))
                        .bind("call"),
                    this);
}

void ClipGradCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Call = Result.Nodes.getNodeAs<CallExpr>("call");
  const auto *Fn = Result.Nodes.getNodeAs<FunctionDecl>("fn");
  const auto *Callee = dyn_cast<DeclRefExpr>(Call->getCallee()->IgnoreImplicit());
  if (!Callee || !Context.canEdit(Name, Call->getSourceRange()))
    return;
  const std::vector<const Expr *> Args = explicitArgs(Call);
  const bool IsNorm = plainName(Fn) == "clip_grad_norm_";
  if (IsNorm && Args.size() > 3) {
    warn(Call->getBeginLoc(),
         "clip_grad_norm_ with error_if_nonfinite is left as it is; "
         "accelerator.clip_grad_norm_ takes (parameters, max_norm, norm_type)");
    return;
  }
  const std::string Acc = accelerator(Call);
  if (Acc.empty())
    return;
  Context.replace(Name, SourceRange(Callee->getBeginLoc(), Callee->getNameInfo().getEndLoc()),
                  Acc + "." + Fn->getNameAsString());
  // The accelerator takes a vector of parameters; a single tensor becomes a one-element list.
  if (!Args.empty() && Fn->getNumParams() > 0 && isTensor(Fn->getParamDecl(0)->getType())) {
    Context.insert(Name, Args[0]->getBeginLoc(), "{");
    Context.replace(Name,
                    CharSourceRange::getCharRange(
                        Lexer::getLocForEndOfToken(Args[0]->getEndLoc(), 0, Context.sourceManager(),
                                                   Context.ast().getLangOpts()),
                        Lexer::getLocForEndOfToken(Args[0]->getEndLoc(), 0, Context.sourceManager(),
                                                   Context.ast().getLangOpts())),
                    "}");
  }
  Context.applied(Name, Call->getBeginLoc());
}

} // namespace accel::migrate
