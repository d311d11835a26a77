//===- AcceleratorReach.cpp -----------------------------------------------------------------===//
#include "AcceleratorReach.h"

#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"

using namespace clang;

namespace accel::migrate {
namespace {

constexpr const char *kOutsideFunctions =
    "this initializer runs before main creates the accelerator (a namespace-scope variable); "
    "make it inside main and migrate again";

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
  return "accelerator";
}

std::string AcceleratorReach::acceleratorInInitializer(const CXXConstructorDecl *Ctor) const {
  if (std::string Existing = Facts.acceleratorIn(patternOf(Ctor)); !Existing.empty())
    return Existing;
  return CurrentAccelerator;
}

std::string AcceleratorReach::acceleratorInClass(const CXXRecordDecl *Class) const {
  if (std::string Existing = Facts.acceleratorMemberOf(Class); !Existing.empty())
    return Existing;
  return CurrentAccelerator;
}

std::string AcceleratorReach::accelerator(const Stmt *S, std::string &Why) {
  // Walk out to the function whose body binds it. A lambda that captures by reference sees its
  // enclosing function's; any other lambda binds its own (the Accelerator is not copied).
  const FunctionDecl *ByReferenceLambda = nullptr;
  DynTypedNode Node = DynTypedNode::create(*S);
  for (unsigned Guard = 0; Guard < 256; ++Guard) {
    const auto Parents = Ctx.getParents(Node);
    if (Parents.empty())
      break;
    const DynTypedNode Child = Node;
    Node = Parents[0];
    // A constructor reached from anything but its body: one of its member initializers (Clang
    // 14's parent map has no CXXCtorInitializer node between them).
    if (const auto *Ctor = Node.get<CXXConstructorDecl>();
        Ctor && Child.get<Stmt>() && Child.get<Stmt>() != Ctor->getBody())
      return acceleratorInInitializer(Ctor);
    if (Node.get<CXXCtorInitializer>()) {
      for (const auto &Up : Ctx.getParents(Node))
        if (const auto *Ctor = Up.get<CXXConstructorDecl>())
          return acceleratorInInitializer(Ctor);
      return CurrentAccelerator;
    }
    if (const auto *Field = Node.get<FieldDecl>())
      return acceleratorInClass(cast<CXXRecordDecl>(Field->getParent()));
    if (const auto *Lambda = Node.get<LambdaExpr>()) {
      if (Lambda->getCaptureDefault() != LCD_ByRef)
        return requireAccelerator(Lambda->getCallOperator());
      if (!ByReferenceLambda)
        ByReferenceLambda = Lambda->getCallOperator();
      continue;
    }
    if (const auto *FD = Node.get<FunctionDecl>()) {
      const auto *Method = dyn_cast<CXXMethodDecl>(FD);
      if (!Method || !Method->getParent()->isLambda())
        return requireAccelerator(FD);
      if (Method->getParent()->getLambdaCaptureDefault() != LCD_ByRef)
        return requireAccelerator(Method);
      if (!ByReferenceLambda)
        ByReferenceLambda = Method;
    }
  }
  // A lambda at namespace scope has no enclosing function to share: it binds its own.
  if (ByReferenceLambda)
    return requireAccelerator(ByReferenceLambda);
  Why = kOutsideFunctions;
  return {};
}

} // namespace accel::migrate
