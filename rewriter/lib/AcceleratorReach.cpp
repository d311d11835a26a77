//===- AcceleratorReach.cpp -----------------------------------------------------------------===//
#include "AcceleratorReach.h"

#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"

using namespace clang;

namespace accel::migrate {
namespace {

constexpr const char *kLambdaByCopy =
    "this lambda does not capture by reference, so it cannot reach the accelerator; capture it "
    "([&]) and migrate this line by hand";

} // namespace

const Stmt *AcceleratorReach::parentStmt(const Stmt *S) {
  // Through declarations: the initializer of `auto x = ...;` has the VarDecl as parent, whose
  // parent is the DeclStmt.
  DynTypedNode Node = DynTypedNode::create(*S);
  for (unsigned Guard = 0; Guard < 8; ++Guard) {
    const auto Parents = Ctx.getParents(Node);
    if (Parents.empty())
      return nullptr;
    if (const auto *P = Parents[0].get<Stmt>())
      return P;
    if (!Parents[0].get<VarDecl>())
      return nullptr;
    Node = Parents[0];
  }
  return nullptr;
}

const FunctionDecl *AcceleratorReach::enclosingFunction(const Stmt *S) {
  DynTypedNode Node = DynTypedNode::create(*S);
  for (unsigned Guard = 0; Guard < 256; ++Guard) {
    const auto Parents = Ctx.getParents(Node);
    if (Parents.empty())
      return nullptr;
    Node = Parents[0];
    if (const auto *FD = Node.get<FunctionDecl>())
      return patternOf(FD);
    if (const auto *Lambda = Node.get<LambdaExpr>())
      return Lambda->getCallOperator();
  }
  return nullptr;
}

std::string AcceleratorReach::requireAccelerator(const FunctionDecl *Fn) {
  Fn = patternOf(Fn);
  if (std::string Existing = Facts.acceleratorIn(Fn); !Existing.empty())
    return Existing;
  if (Fn == Facts.host()) {
    HostNeedsAccelerator = true;
    return "accelerator";
  }
  NeedAccelerator.insert(Fn);
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Fn);
      Method && !Method->isStatic() && !Method->getParent()->isLambda())
    return requireMemberAccelerator(Method->getParent());
  return "accelerator";
}

std::string AcceleratorReach::requireMemberAccelerator(const CXXRecordDecl *Class) {
  Class = Class->getCanonicalDecl();
  if (std::string Existing = Facts.acceleratorMemberOf(Class); !Existing.empty())
    return Existing;
  NeedMemberAccelerator.insert(Class);
  return "accelerator";
}

std::string AcceleratorReach::accelerator(const Stmt *S, std::string &Why) {
  // Walk out to the function; a lambda on the way sees that function's accelerator only when it
  // captures by reference.
  DynTypedNode Node = DynTypedNode::create(*S);
  for (unsigned Guard = 0; Guard < 256; ++Guard) {
    const auto Parents = Ctx.getParents(Node);
    if (Parents.empty())
      return {};
    Node = Parents[0];
    if (const auto *FD = Node.get<FunctionDecl>()) {
      const auto *Method = dyn_cast<CXXMethodDecl>(FD);
      if (!Method || !Method->getParent()->isLambda())
        return requireAccelerator(FD);
      if (Method->getParent()->getLambdaCaptureDefault() == LCD_ByRef)
        continue; // on to the lambda's enclosing function
      Why = kLambdaByCopy;
      return {};
    }
    if (const auto *Lambda = Node.get<LambdaExpr>();
        Lambda && Lambda->getCaptureDefault() != LCD_ByRef) {
      Why = kLambdaByCopy;
      return {};
    }
  }
  return {};
}

} // namespace accel::migrate
