//===- RemovePlacementCheck.cpp -------------------------------------------------------------===//
#include "RemovePlacementCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

// A device argument the runtime now takes care of: a device variable, or anything naming CUDA.
// An explicit torch::kCPU is the program's own decision and stays.
bool isManagedDevice(const Expr *Arg, const FunctionDecl *Fn) {
  const Expr *Written = Arg->IgnoreUnlessSpelledInSource();
  if (!isDevice(Written->getType()) && !isDeviceKind(Written->getType()))
    return false;
  // The program's own device variable (not a constant such as torch::kCPU).
  if (const auto *Ref = dyn_cast<DeclRefExpr>(Written->IgnoreParenImpCasts()))
    if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl()); Var && Var->hasLocalStorage())
      return true;
  return mentionsCuda(Written, Fn);
}

// What a chain of shape-only tensor methods (`batch.data.view({-1, 784})`) is called on: they
// keep the device, so the batch's placement is theirs.
const Expr *throughShapeChanges(const Expr *E) {
  while (const auto *MC = dyn_cast<CXXMemberCallExpr>(E->IgnoreImplicit()->IgnoreParens())) {
    const CXXMethodDecl *Method = MC->getMethodDecl();
    if (!Method || !isTensor(QualType(Method->getParent()->getTypeForDecl(), 0)))
      break;
    const llvm::StringRef Name = plainName(Method);
    if (Name != "view" && Name != "reshape" && Name != "flatten" && Name != "squeeze" &&
        Name != "unsqueeze" && Name != "permute" && Name != "transpose" && Name != "contiguous" &&
        Name != "narrow" && Name != "select")
      break;
    E = MC->getImplicitObjectArgument();
  }
  return E;
}

// The statement `x = x.to(device);` that Call is the value of (a batch's tensor moved in place,
// `batch.data = batch.data.to(device);`): without the device it would read `x = x;`, so the
// whole statement goes. Null when Call is anything else.
const Stmt *movesInPlace(MigrationContext &Context, const CXXMemberCallExpr *Call,
                         const Expr *Object) {
  const Stmt *Current = Call;
  for (unsigned Guard = 0; Guard < 8; ++Guard) {
    const Stmt *Parent = Context.reach().parentStmt(Current);
    if (!Parent || !isa<Expr>(Parent))
      return nullptr;
    const Expr *Target = assignedTarget(Parent);
    if (!Target) {
      // Only the wrappers of a value passed on (`x = f(x.to(device))` is not a move in place).
      if (!isa<ImplicitCastExpr>(Parent) && !isa<MaterializeTemporaryExpr>(Parent) &&
          !isa<CXXBindTemporaryExpr>(Parent) && !isa<CXXConstructExpr>(Parent) &&
          !isa<ParenExpr>(Parent))
        return nullptr;
    } else {
      const SourceText &Source = Context.source();
      if (Target->getSourceRange() == Current->getSourceRange() ||
          Source.text(Target->getSourceRange()) != Source.text(Object->getSourceRange()))
        return nullptr;
      return asFullStatement(Context, cast<Expr>(Parent));
    }
    Current = Parent;
  }
  return nullptr;
}

} // namespace

void RemovePlacementCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(cxxMemberCallExpr(callee(cxxMethodDecl(hasAnyName("to", "cuda")))).bind("call"),
                    this);
}

void RemovePlacementCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Call = Result.Nodes.getNodeAs<CXXMemberCallExpr>("call");
  const CXXMethodDecl *Method = Call->getMethodDecl();
  const QualType Class(Method->getParent()->getTypeForDecl(), 0);
  const Expr *Object = Call->getImplicitObjectArgument();
  const std::vector<const Expr *> Args = explicitArgs(Call);
  const FunctionDecl *Fn = Context.reach().enclosingFunction(Call);
  const bool IsCuda = plainName(Method) == "cuda";
  if (!IsCuda && (Args.empty() || !isManagedDevice(Args[0], Fn)))
    return;
  // With a dtype after the device, only the device goes: x.to(device, kHalf) -> x.to(kHalf).
  const bool KeepsDtype = !IsCuda && Args.size() >= 2 && !Args[1]->getType()->isBooleanType();

  if (isModule(Class)) {
    if (IsCuda || !Context.facts().isPreparedModel(rootDecl(Object)) ||
        !Context.canEdit(Name, Call->getSourceRange()))
      return;
    if (KeepsDtype) {
      Context.replace(
          Name, CharSourceRange::getCharRange(Args[0]->getBeginLoc(), Args[1]->getBeginLoc()), "");
    } else if (const Stmt *Statement = asFullStatement(Context, Call)) {
      Context.removeStatement(Name, Statement);
    } else {
      return;
    }
    Context.applied(Name, Call->getBeginLoc());
    return;
  }

  if (!isTensor(Class))
    return;
  // Only the batches of a prepared loader: they arrive on the device already.
  const ValueDecl *Root = rootDecl(throughShapeChanges(Object));
  const CXXForRangeStmt *Loop = Root ? rangeForOver(Context, Call, Root) : nullptr;
  if (!Loop || !iteratesPreparedLoader(Context, Loop) ||
      !Context.canEdit(Name, Call->getSourceRange()))
    return;
  if (KeepsDtype)
    Context.replace(
        Name, CharSourceRange::getCharRange(Args[0]->getBeginLoc(), Args[1]->getBeginLoc()), "");
  else if (const Stmt *Statement = movesInPlace(Context, Call, Object))
    Context.removeStatement(Name, Statement);
  else
    Context.replace(Name, Call->getSourceRange(), Context.source().text(Object->getSourceRange()));
  Context.applied(Name, Call->getBeginLoc());
}

} // namespace accel::migrate
