//===- AttentionCheck.cpp -------------------------------------------------------------------===//
#include "AttentionCheck.h"

#include "clang/AST/Expr.h"

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

void AttentionCheck::registerMatchers(MatchFinder &Finder) {
  // torch::scaled_dot_product_attention is ATen's, named through torch's `using namespace at`.
  Finder.addMatcher(callExpr(callee(functionDecl(hasName("::at::scaled_dot_product_attention"))),
                             callee(expr(ignoringImplicit(declRefExpr().bind("callee")))))
                        .bind("attention"),
                    this);
  Finder.addMatcher(
      cxxConstructExpr(hasType(cxxRecordDecl(hasName("::accel::ParallelismConfig")))).bind("mesh"),
      this);
  Finder.addMatcher(cxxMemberCallExpr(callee(cxxMethodDecl(
                                          hasName("::accel::Accelerator::maybe_context_parallel"))))
                        .bind("mesh"),
                    this);
}

void AttentionCheck::check(const MatchFinder::MatchResult &Result) {
  if (Result.Nodes.getNodeAs<Stmt>("mesh")) {
    HasMesh = true;
    return;
  }
  const auto *Callee = Result.Nodes.getNodeAs<DeclRefExpr>("callee");
  if (Callee && !Callee->getLocation().isMacroID() && Context.isEditable(Callee->getLocation()))
    Attention.push_back(Callee);
}

void AttentionCheck::finish() {
  if (!HasMesh)
    return;
  for (const DeclRefExpr *Callee : Attention) {
    // The name as written, with its qualifier: `torch::`, `at::`, or none under a using.
    const SourceRange Written(Callee->getBeginLoc(), Callee->getLocation());
    if (!Context.canEdit(Name, Written))
      continue;
    Context.replace(Name, Written, "accel::scaled_dot_product_attention");
    Context.applied(Name, Callee->getLocation());
  }
}

} // namespace accel::migrate
