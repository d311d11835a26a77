//===- BatchViewCheck.cpp -------------------------------------------------------------------===//
#include "BatchViewCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

// The first element of a braced shape (`{batch_size, -1}`), looking through the conversions to
// IntArrayRef; null when the shape is not written as a list.
const Expr *firstDimension(const Expr *Shape) {
  Shape = Shape->IgnoreUnlessSpelledInSource();
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(Shape);
      Construct && Construct->getNumArgs() > 0)
    Shape = Construct->getArg(0)->IgnoreUnlessSpelledInSource();
  if (const auto *List = dyn_cast<CXXStdInitializerListExpr>(Shape))
    Shape = List->getSubExpr()->IgnoreUnlessSpelledInSource();
  if (const auto *Temp = dyn_cast<MaterializeTemporaryExpr>(Shape))
    Shape = Temp->getSubExpr()->IgnoreUnlessSpelledInSource();
  const auto *Init = dyn_cast<InitListExpr>(Shape);
  return Init && Init->getNumInits() > 0 ? Init->getInit(0)->IgnoreParenImpCasts() : nullptr;
}

} // namespace

void BatchViewCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(
      cxxMemberCallExpr(callee(cxxMethodDecl(hasAnyName("view", "reshape"))), argumentCountIs(1))
          .bind("view"),
      this);
}

void BatchViewCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *View = Result.Nodes.getNodeAs<CXXMemberCallExpr>("view");
  if (!isTensor(QualType(View->getMethodDecl()->getParent()->getTypeForDecl(), 0)) ||
      !Context.isEditable(View->getBeginLoc()))
    return;
  // A fixed size: a named variable or constant (a literal, as in `{1, 28, 28}`, is a shape of
  // its own; `x.size(0)` and -1 follow the batch).
  const auto *Size = dyn_cast_or_null<DeclRefExpr>(firstDimension(View->getArg(0)));
  const auto *Var = Size ? dyn_cast<VarDecl>(Size->getDecl()) : nullptr;
  if (!Var || !Var->getType()->isIntegerType())
    return;
  const ValueDecl *Root = rootDecl(View->getImplicitObjectArgument());
  const CXXForRangeStmt *Loop = Root ? rangeForOver(Context, View, Root) : nullptr;
  if (!Loop || !iteratesPreparedLoader(Context, Loop))
    return;
  // The batch's own first dimension is what the fixed size stood for: wherever the original ran,
  // every batch had that many samples (a prepared loader collates and splits along dimension 0),
  // so on one process the shape is the same, and on N processes it follows a process's share.
  // Written out only for an object that can be named twice (a variable or its members, no call).
  const Expr *Object = View->getImplicitObjectArgument()->IgnoreParenImpCasts();
  const Expr *Part = Object;
  while (const auto *Member = dyn_cast<MemberExpr>(Part))
    Part = Member->getBase()->IgnoreParenImpCasts();
  if (!isa<DeclRefExpr>(Part) || !Context.canEdit(Name, Size->getSourceRange())) {
    warn(Size->getBeginLoc(),
         llvm::Twine("'") + Var->getName() +
             "' fixes the batch dimension of a prepared loader's batch; a process's share of a "
             "batch (and its last batch) can be smaller, so write -1 or the batch's size(0)");
    return;
  }
  Context.replace(Name, Size->getSourceRange(),
                  Context.source().text(Object->getSourceRange()) + ".size(0)");
  Context.applied(Name, Size->getBeginLoc());
}

} // namespace accel::migrate
