//===- ProgramFacts.cpp ---------------------------------------------------------------------===//
#include "ProgramFacts.h"

#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"

using namespace clang;

namespace accel::migrate {

namespace {

bool isAcceleratorCall(const Expr *E) {
  if (!E)
    return false;
  E = E->IgnoreImplicit();
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E); Construct && Construct->getNumArgs() == 1)
    E = Construct->getArg(0)->IgnoreImplicit();
  const auto *MC = dyn_cast<CXXMemberCallExpr>(E);
  return MC && MC->getMethodDecl() &&
         isAccelerator(QualType(MC->getMethodDecl()->getParent()->getTypeForDecl(), 0));
}

// The model variables whose parameters() an optimizer's initializer reads.
void collectParameterOwners(const Expr *Init, std::vector<const ValueDecl *> &Owners) {
  struct Finder : RecursiveASTVisitor<Finder> {
    std::vector<const ValueDecl *> *Out;
    bool VisitCXXMemberCallExpr(CXXMemberCallExpr *MC) {
      const auto *MD = MC->getMethodDecl();
      if (MD && (plainName(MD) == "parameters" || plainName(MD) == "named_parameters"))
        if (const ValueDecl *Root = rootDecl(MC->getImplicitObjectArgument()))
          if (isModule(Root->getType()))
            Out->push_back(Root);
      return true;
    }
  } F;
  F.Out = &Owners;
  F.TraverseStmt(const_cast<Expr *>(Init));
}

} // namespace

class FactsCollector : public RecursiveASTVisitor<FactsCollector> {
public:
  FactsCollector(ProgramFacts &Facts, const ProgramFacts::EditablePredicate &IsEditable)
      : Facts(Facts), IsEditable(IsEditable) {}
  bool shouldVisitTemplateInstantiations() const { return true; }

  bool VisitFunctionDecl(FunctionDecl *FD) {
    if (FD->isMain() && FD->hasBody() && IsEditable(FD->getLocation()))
      MainFn = FD;
    for (const ParmVarDecl *P : FD->parameters())
      if (isAccelerator(P->getType()) && P->getType()->isReferenceType())
        Facts.AcceleratorNames[patternOf(FD)] = P->getNameAsString();
    return true;
  }

  bool VisitVarDecl(VarDecl *VD) {
    if (!VD->isLocalVarDecl() || isa<ParmVarDecl>(VD) || !IsEditable(VD->getLocation()))
      return true;
    const auto *Fn = dyn_cast_or_null<FunctionDecl>(VD->getParentFunctionOrMethod());
    if (!Fn)
      return true;
    const QualType T = VD->getType();
    const Expr *Init = VD->getInit();
    if (isAccelerator(T) && !T->isReferenceType()) {
      Facts.AcceleratorNames[patternOf(Fn)] = VD->getNameAsString();
      return true;
    }
    if (T->isReferenceType())
      return true; // an alias of something declared elsewhere
    if (isOptimizer(T)) {
      Facts.Optimizers.push_back(VD);
      if (isAcceleratorCall(Init))
        Facts.Prepared.insert(VD);
      std::vector<const ValueDecl *> Owners;
      if (Init)
        collectParameterOwners(Init, Owners);
      if (Owners.empty())
        Facts.Unpaired.push_back(VD);
      for (const ValueDecl *Owner : Owners)
        if (const auto *Model = dyn_cast<VarDecl>(Owner);
            Model && !isa<ParmVarDecl>(Model) && Model->isLocalVarDecl() &&
            Facts.ModelSet.insert(Model).second)
          Facts.Models.push_back(Model);
      noteHostCandidate(Fn);
    } else if (isScheduler(T)) {
      Facts.Schedulers.push_back(VD);
      if (isAcceleratorCall(Init))
        Facts.Prepared.insert(VD);
    } else if (isDataLoader(T) && Init) {
      if (isAcceleratorCall(Init)) {
        Facts.Prepared.insert(VD);
        Facts.LoaderSet.insert(VD);
      } else if (findMakeDataLoaderCall(Init)) {
        Facts.Loaders.push_back(VD);
        Facts.LoaderSet.insert(VD);
        noteHostCandidate(Fn);
      }
    }
    return true;
  }

  bool VisitCallExpr(CallExpr *CE) {
    if (const FunctionDecl *Callee = CE->getDirectCallee())
      Facts.Calls[patternOf(Callee)].push_back(CE);
    // accelerator.prepare(model): the model is prepared already.
    if (const auto *MC = dyn_cast<CXXMemberCallExpr>(CE))
      if (const auto *MD = MC->getMethodDecl();
          MD && plainName(MD) == "prepare" && MC->getNumArgs() == 1 &&
          isAccelerator(QualType(MD->getParent()->getTypeForDecl(), 0)))
        if (const ValueDecl *Root = rootDecl(MC->getArg(0)))
          Facts.Prepared.insert(Root);
    return true;
  }

  void finish() {
    if (MainFn)
      Facts.Host = MainFn;
    else if (FirstCandidate)
      Facts.Host = patternOf(FirstCandidate);
  }

private:
  void noteHostCandidate(const FunctionDecl *Fn) {
    if (!FirstCandidate)
      FirstCandidate = Fn;
  }

  ProgramFacts &Facts;
  const ProgramFacts::EditablePredicate &IsEditable;
  const FunctionDecl *MainFn = nullptr;
  const FunctionDecl *FirstCandidate = nullptr;
};

void ProgramFacts::analyze(ASTContext &Ctx, const EditablePredicate &IsEditable) {
  FactsCollector Collector(*this, IsEditable);
  for (Decl *D : Ctx.getTraversalScope())
    Collector.TraverseDecl(D);
  Collector.finish();
  // A model prepared by hand counts as a model even without an optimizer in sight.
  for (const ValueDecl *D : Prepared)
    if (const auto *VD = dyn_cast<VarDecl>(D); VD && isModule(VD->getType()))
      if (ModelSet.insert(VD).second)
        Models.push_back(VD);
}

const ValueDecl *ProgramFacts::canonical(const ValueDecl *D) {
  return D ? cast<ValueDecl>(D->getCanonicalDecl()) : nullptr;
}

const std::vector<const CallExpr *> &ProgramFacts::callsTo(const FunctionDecl *Fn) const {
  static const std::vector<const CallExpr *> None;
  auto It = Calls.find(patternOf(Fn));
  return It == Calls.end() ? None : It->second;
}

std::string ProgramFacts::acceleratorIn(const FunctionDecl *Fn) const {
  auto It = AcceleratorNames.find(patternOf(Fn));
  return It == AcceleratorNames.end() ? std::string() : It->second;
}

bool ProgramFacts::isBoundParam(const ParmVarDecl *P,
                                const std::function<bool(const ValueDecl *, unsigned)> &Pred,
                                unsigned Depth) const {
  const auto *Fn = dyn_cast_or_null<FunctionDecl>(P->getDeclContext());
  if (!Fn || Depth > 4)
    return false;
  const unsigned Index = P->getFunctionScopeIndex();
  const auto &Sites = callsTo(Fn);
  if (Sites.empty())
    return false;
  for (const CallExpr *Call : Sites) {
    if (Index >= Call->getNumArgs())
      return false;
    const ValueDecl *Arg = rootDecl(Call->getArg(Index));
    if (!Arg || !Pred(Arg, Depth + 1))
      return false;
  }
  return true;
}

bool ProgramFacts::preparedModel(const ValueDecl *D, unsigned Depth) const {
  if (!D)
    return false;
  if (const auto *P = dyn_cast<ParmVarDecl>(D))
    return isModule(P->getType()) &&
           isBoundParam(P, [this](const ValueDecl *A, unsigned N) { return preparedModel(A, N); },
                        Depth);
  return ModelSet.count(D) || (Prepared.count(canonical(D)) && isModule(D->getType()));
}

bool ProgramFacts::preparedLoader(const ValueDecl *D, unsigned Depth) const {
  if (!D)
    return false;
  if (const auto *P = dyn_cast<ParmVarDecl>(D))
    return isBoundParam(P, [this](const ValueDecl *A, unsigned N) { return preparedLoader(A, N); },
                        Depth);
  return LoaderSet.count(D);
}

bool ProgramFacts::isPreparedModel(const ValueDecl *D) const { return preparedModel(D, 0); }
bool ProgramFacts::isPreparedLoader(const ValueDecl *D) const { return preparedLoader(D, 0); }

} // namespace accel::migrate
