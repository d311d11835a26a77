//===- ProgramFacts.cpp ---------------------------------------------------------------------===//
#include "ProgramFacts.h"

#include "TorchPatterns.h"

#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"

#include <map>
#include <set>

using namespace clang;

namespace accel::migrate {

namespace {

bool isAcceleratorCall(const Expr *E) {
  if (!E)
    return false;
  E = E->IgnoreImplicit();
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E);
      Construct && Construct->getNumArgs() == 1)
    E = Construct->getArg(0)->IgnoreImplicit();
  const auto *Call = dyn_cast<CallExpr>(E);
  return Call && isAcceleratorMethodCall(Call, "");
}

// What feeds each local variable of a function: its initializer, what push_back, emplace_back,
// insert or append add to it, and for a range-for loop variable the range it walks. An optimizer
// built from `params` (auto params = model->parameters();), from a vector filled in a loop over
// model->named_parameters() (weight decay on some parameters only), or from param groups made of
// those, reads its model's parameters through them.
class VariableFeeds : public RecursiveASTVisitor<VariableFeeds> {
public:
  explicit VariableFeeds(const Stmt *Body) {
    if (Body)
      TraverseStmt(const_cast<Stmt *>(Body));
  }
  const std::vector<const Expr *> &of(const VarDecl *Var) const {
    static const std::vector<const Expr *> None;
    const auto Found = Feeds.find(Var);
    return Found == Feeds.end() ? None : Found->second;
  }

  bool VisitVarDecl(VarDecl *VD) {
    if (VD->isLocalVarDecl() && VD->getInit())
      Feeds[VD].push_back(VD->getInit());
    return true;
  }
  bool VisitCXXForRangeStmt(CXXForRangeStmt *For) {
    if (const VarDecl *Var = For->getLoopVariable(); Var && For->getRangeInit())
      Feeds[Var].push_back(For->getRangeInit());
    return true;
  }
  bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
    const auto *Method = Call->getMethodDecl();
    if (!Method)
      return true;
    const llvm::StringRef Name = plainName(Method);
    if (Name != "push_back" && Name != "emplace_back" && Name != "insert" && Name != "append")
      return true;
    // `(cond ? decay : no_decay).push_back(p)` feeds both.
    std::vector<const Expr *> Targets{Call->getImplicitObjectArgument()};
    if (const auto *Choice = dyn_cast<ConditionalOperator>(Targets.front()->IgnoreParenImpCasts()))
      Targets = {Choice->getTrueExpr(), Choice->getFalseExpr()};
    for (const Expr *Target : Targets)
      if (const auto *Var = dyn_cast_or_null<VarDecl>(rootDecl(Target)))
        for (const Expr *Arg : Call->arguments())
          Feeds[Var].push_back(Arg);
    return true;
  }

private:
  std::map<const VarDecl *, std::vector<const Expr *>> Feeds;
};

// The model variables whose parameters() an optimizer's initializer reads, directly or through
// the local variables of its function (Feeds) that it names.
void collectParameterOwners(const Expr *Init, std::vector<const ValueDecl *> &Owners,
                            const VariableFeeds *Feeds = nullptr) {
  struct Finder : RecursiveASTVisitor<Finder> {
    std::vector<const ValueDecl *> *Out;
    std::vector<const VarDecl *> Variables;
    bool VisitCXXMemberCallExpr(CXXMemberCallExpr *MC) {
      const auto *MD = MC->getMethodDecl();
      if (MD && (plainName(MD) == "parameters" || plainName(MD) == "named_parameters"))
        if (const ValueDecl *Root = rootDecl(MC->getImplicitObjectArgument()))
          if (isModule(Root->getType()) && std::find(Out->begin(), Out->end(), Root) == Out->end())
            Out->push_back(Root);
      return true;
    }
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
          Var && !isa<ParmVarDecl>(Var) && (Var->isLocalVarDecl() || Var->isCXXForRangeDecl()))
        Variables.push_back(Var);
      return true;
    }
    // `make_optimizer(model)`: a helper of the program's that builds the optimizer from the
    // parameters() of a model it is given; the owner is the argument passed for that parameter.
    bool VisitCallExpr(CallExpr *Call) {
      const FunctionDecl *Callee = Call->getDirectCallee();
      const FunctionDecl *Definition = nullptr;
      if (!Callee || isa<CXXMethodDecl>(Callee) || !Callee->hasBody(Definition) || Depth > 2)
        return true;
      Finder Inner;
      std::vector<const ValueDecl *> Found;
      Inner.Out = &Found;
      Inner.Depth = Depth + 1;
      Inner.TraverseStmt(Definition->getBody());
      for (const ValueDecl *Owner : Found) {
        const auto *Parameter = dyn_cast<ParmVarDecl>(Owner);
        if (!Parameter || Parameter->getDeclContext() != Definition ||
            Parameter->getFunctionScopeIndex() >= Call->getNumArgs())
          continue;
        if (const ValueDecl *Root = rootDecl(Call->getArg(Parameter->getFunctionScopeIndex()));
            Root && isModule(Root->getType()) && llvm::find(*Out, Root) == Out->end())
          Out->push_back(Root);
      }
      return true;
    }
    unsigned Depth = 0;
  } F;
  F.Out = &Owners;
  F.TraverseStmt(const_cast<Expr *>(Init));
  if (!Feeds)
    return;
  // Through the variables it names, as far as they are fed in the function (a few levels: a
  // group list of filtered vectors of a loop's parameters).
  std::set<const VarDecl *> Seen;
  for (unsigned Level = 0; Level < 4 && !F.Variables.empty(); ++Level) {
    std::vector<const VarDecl *> Next;
    std::swap(Next, F.Variables);
    for (const VarDecl *Var : Next)
      if (Seen.insert(Var).second)
        for (const Expr *Feed : Feeds->of(Var))
          F.TraverseStmt(const_cast<Expr *>(Feed));
  }
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
    noteLoaderFactory(FD);
    return true;
  }

  bool VisitFieldDecl(FieldDecl *FD) {
    const auto *Class = dyn_cast<CXXRecordDecl>(FD->getParent());
    if (!Class || isa<ClassTemplateSpecializationDecl>(Class) || !IsEditable(FD->getLocation()))
      return true;
    const QualType T = FD->getType();
    if (isAccelerator(T) && T->isReferenceType()) {
      Facts.AcceleratorMembers[Class->getCanonicalDecl()] = FD->getNameAsString();
    } else if (isOptimizerOrPointer(T)) {
      if (isClassOrDerived(T, "accel::AcceleratedOptimizer"))
        Facts.Prepared.insert(FD);
      noteMemberOptimizer(FD, FD->getInClassInitializer());
    }
    return true;
  }

  bool VisitCXXConstructorDecl(CXXConstructorDecl *Ctor) {
    if (Ctor->isTemplateInstantiation() || isa<ClassTemplateSpecializationDecl>(Ctor->getParent()))
      return true;
    for (const CXXCtorInitializer *Init : Ctor->inits()) {
      const FieldDecl *Member = Init->getMember();
      if (!Init->isWritten() || !Member || !isOptimizerOrPointer(Member->getType()) ||
          !IsEditable(Member->getLocation()))
        continue;
      Facts.MemberInitializers[Member].push_back({Ctor, Init});
      noteMemberOptimizer(Member, Init->getInit());
    }
    return true;
  }

  bool VisitCXXConstructExpr(CXXConstructExpr *E) {
    const CXXConstructorDecl *Ctor = E->getConstructor();
    if (!Ctor || Ctor->isCopyOrMoveConstructor() || !IsEditable(Ctor->getParent()->getLocation()))
      return true;
    noteConstruction(Ctor->getParent());
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
    if (isAccelerator(T)) { // its own, or the process's bound by reference
      Facts.AcceleratorNames[patternOf(Fn)] = VD->getNameAsString();
      return true;
    }
    if (T->isReferenceType())
      return true; // an alias of something declared elsewhere
    if (isOptimizerOrPointer(T)) {
      Facts.Optimizers.push_back(VD);
      if (isAcceleratorCall(Init))
        Facts.Prepared.insert(VD);
      std::vector<const ValueDecl *> Owners;
      if (Init) {
        const VariableFeeds Feeds(Fn->getBody());
        collectParameterOwners(Init, Owners, &Feeds);
      }
      if (Owners.empty())
        Facts.Unpaired.push_back(VD);
      for (const ValueDecl *Owner : Owners) {
        if (const auto *Parameter = dyn_cast<ParmVarDecl>(Owner)) {
          if (Facts.TrainedParameterSet.insert(Parameter).second)
            Facts.TrainedParameters.push_back({Parameter, VD});
          continue;
        }
        if (const auto *Model = dyn_cast<VarDecl>(Owner);
            Model && Model->isLocalVarDecl() && Facts.ModelSet.insert(Model).second)
          Facts.Models.push_back(Model);
      }
      noteMemberModels(Owners);
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
      } else if (const auto *Call = dyn_cast<CallExpr>(Init->IgnoreImplicit());
                 Call && Call->getDirectCallee()) {
        Facts.LoadersFromCalls.push_back({VD, Call->getDirectCallee()});
      }
    }
    return true;
  }

  // `optimizer = new torch::optim::Adam(model->parameters())` in a method of the class that
  // holds the optimizer by pointer.
  bool VisitBinaryOperator(BinaryOperator *BO) {
    if (BO->getOpcode() == BO_Assign)
      noteMemberAssignment(BO->getLHS(), BO->getRHS(), BO);
    return true;
  }
  bool VisitCXXOperatorCallExpr(CXXOperatorCallExpr *Op) {
    if (Op->getOperator() == OO_Equal && Op->getNumArgs() == 2)
      noteMemberAssignment(Op->getArg(0), Op->getArg(1), Op);
    return true;
  }

  // `return make_data_loader(...)` from a function of the program's that returns a loader.
  void noteLoaderFactory(FunctionDecl *Fn) {
    if (!Fn->doesThisDeclarationHaveABody() || !IsEditable(Fn->getLocation()) ||
        !isDataLoader(Fn->getReturnType()))
      return;
    struct Returns : RecursiveASTVisitor<Returns> {
      std::vector<const CallExpr *> Made;
      bool VisitReturnStmt(ReturnStmt *Return) {
        const Expr *Value = Return->getRetValue();
        if (const CallExpr *Make = Value ? findMakeDataLoaderCall(Value) : nullptr;
            Make && Value->IgnoreImplicit() == Make)
          Made.push_back(Make);
        return true;
      }
      bool TraverseLambdaExpr(LambdaExpr *) { return true; }
    } Found;
    Found.TraverseStmt(Fn->getBody());
    if (Found.Made.empty())
      return;
    Facts.ReturnedLoaders.insert(Facts.ReturnedLoaders.end(), Found.Made.begin(), Found.Made.end());
    // The function, and every method it overrides: a call through the interface gets it too.
    std::vector<const FunctionDecl *> Named = {patternOf(Fn)};
    for (size_t I = 0; I < Named.size(); ++I)
      if (const auto *Method = dyn_cast<CXXMethodDecl>(Named[I]))
        for (const CXXMethodDecl *Overridden : Method->overridden_methods())
          Named.push_back(Overridden);
    for (const FunctionDecl *F : Named)
      if (std::string Usr = usrOf(F); !Usr.empty()) {
        Facts.LoaderFactoryUsrs.insert(Usr);
        Facts.Summary.LoaderFactories.insert(std::move(Usr));
      }
  }

  bool VisitCallExpr(CallExpr *CE) {
    if (const FunctionDecl *Callee = CE->getDirectCallee()) {
      Facts.Calls[patternOf(Callee)].push_back(CE);
      if (IsEditable(Callee->getLocation()))
        if (std::string Usr = usrOf(patternOf(Callee)); !Usr.empty())
          Facts.Summary.Called.insert(std::move(Usr));
      // std::make_unique<T>(args) / std::make_shared<T>(args) construct a T.
      const std::string Name = Callee->getQualifiedNameAsString();
      if (const TemplateArgumentList *Args = Callee->getTemplateSpecializationArgs();
          Args && Args->size() > 0 && Args->get(0).getKind() == TemplateArgument::Type &&
          (Name == "std::make_unique" || Name == "std::make_shared"))
        if (const CXXRecordDecl *Made = Args->get(0).getAsType()->getAsCXXRecordDecl();
            Made && IsEditable(Made->getLocation()))
          noteConstruction(Made);
    }
    // accelerator.prepare(model): the model is prepared already.
    if (isAcceleratorMethodCall(CE, "prepare") && CE->getNumArgs() == 1)
      if (const ValueDecl *Root = rootDecl(CE->getArg(0)))
        Facts.Prepared.insert(Root);
    return true;
  }

  void finish(const ProgramSummary &OtherFiles) {
    Facts.Summary.DefinesMain = MainFn != nullptr;
    if (MainFn) {
      Facts.Host = MainFn;
      return;
    }
    if (OtherFiles.DefinesMain || !FirstCandidate)
      return;
    const FunctionDecl *Candidate = patternOf(FirstCandidate);
    const bool TrainsCallersModel =
        llvm::any_of(Facts.TrainedParameters, [&](const ProgramFacts::TrainedParameter &T) {
          return patternOf(dyn_cast<FunctionDecl>(T.Model->getDeclContext())) == Candidate;
        });
    if (!TrainsCallersModel)
      Facts.Host = Candidate;
  }

private:
  void noteMemberOptimizer(const FieldDecl *Optimizer, const Expr *Init) {
    // One held by pointer is prepared where it is set: `optimizer = accelerator.prepare(new ...)`.
    if (isOptimizerPointer(Optimizer->getType()) && isAcceleratorCall(Init))
      Facts.Prepared.insert(Optimizer);
    if (std::find(Facts.MemberOptimizers.begin(), Facts.MemberOptimizers.end(), Optimizer) ==
        Facts.MemberOptimizers.end())
      Facts.MemberOptimizers.push_back(Optimizer);
    std::vector<const ValueDecl *> Owners;
    if (Init)
      collectParameterOwners(Init, Owners);
    noteMemberModels(Owners);
  }

  void noteMemberAssignment(const Expr *Target, const Expr *Value, const Stmt *Assignment) {
    const auto *Member = dyn_cast<MemberExpr>(Target->IgnoreParenImpCasts());
    const auto *Field = Member ? dyn_cast<FieldDecl>(Member->getMemberDecl()) : nullptr;
    if (!Field || !isa<CXXThisExpr>(Member->getBase()->IgnoreParenImpCasts()) ||
        !IsEditable(Field->getLocation()) || !IsEditable(Assignment->getBeginLoc()))
      return;
    if (!isOptimizerPointer(Field->getType())) {
      // Any other member: a model set after construction is prepared where it is set.
      auto &Statements = Facts.MemberAssignmentStatements[Field];
      for (const Stmt *Seen : Statements)
        if (Seen->getBeginLoc() == Assignment->getBeginLoc())
          return;
      Statements.push_back(Assignment);
      return;
    }
    auto &Assignments = Facts.MemberAssignments[Field];
    // An assignment in a template is seen in its pattern and in each instantiation.
    for (const Expr *Seen : Assignments)
      if (Seen->getBeginLoc() == Value->getBeginLoc())
        return;
    Assignments.push_back(Value);
    noteMemberOptimizer(Field, Value);
  }

  // Model members whose parameters an optimizer takes.
  void noteMemberModels(const std::vector<const ValueDecl *> &Owners) {
    for (const ValueDecl *Owner : Owners)
      if (const auto *Model = dyn_cast<FieldDecl>(Owner);
          Model && IsEditable(Model->getLocation()) && Facts.ModelSet.insert(Model).second)
        Facts.MemberModels.push_back(Model);
  }

  void noteConstruction(const CXXRecordDecl *Class) {
    if (std::string Usr = usrOf(Class->getCanonicalDecl()); !Usr.empty())
      Facts.Summary.Called.insert(std::move(Usr));
  }

  void noteHostCandidate(const FunctionDecl *Fn) {
    if (!FirstCandidate)
      FirstCandidate = Fn;
  }

  ProgramFacts &Facts;
  const ProgramFacts::EditablePredicate &IsEditable;
  const FunctionDecl *MainFn = nullptr;
  const FunctionDecl *FirstCandidate = nullptr;
};

void ProgramFacts::analyze(ASTContext &Ctx, const EditablePredicate &IsEditable,
                           const ProgramSummary &OtherFiles) {
  FactsCollector Collector(*this, IsEditable);
  for (Decl *D : Ctx.getTraversalScope())
    Collector.TraverseDecl(D);
  Collector.finish(OtherFiles);
  resolveTrainedParameters(OtherFiles, IsEditable);
  resolveLoaderFactories(OtherFiles);
  setAsideLoadersFeedingNoModel(IsEditable);
  // A model prepared by hand counts as a model even without an optimizer in sight.
  for (const ValueDecl *D : Prepared) {
    if (const auto *VD = dyn_cast<VarDecl>(D); VD && isModule(VD->getType()))
      if (ModelSet.insert(VD).second)
        Models.push_back(VD);
    if (const auto *FD = dyn_cast<FieldDecl>(D); FD && isModule(FD->getType()))
      if (ModelSet.insert(FD).second)
        MemberModels.push_back(FD);
  }
}

namespace {

/// The range-for loops over Loader in Body (`*loader` or `loader`); false when Body names Loader
/// anywhere else (passed to a function, iterated by hand), whose use cannot be read here.
bool onlyLoopsOver(const VarDecl *Loader, const Stmt *Body,
                   std::vector<const CXXForRangeStmt *> &Loops) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const VarDecl *Loader;
    std::vector<const CXXForRangeStmt *> *Loops;
    unsigned InLoops = 0, References = 0;
    bool VisitCXXForRangeStmt(CXXForRangeStmt *Loop) {
      if (rootDecl(Loop->getRangeInit()) == Loader) {
        Loops->push_back(Loop);
        ++InLoops;
      }
      return true;
    }
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      References += Ref->getDecl() == Loader;
      return true;
    }
  } F;
  F.Loader = Loader;
  F.Loops = &Loops;
  F.TraverseStmt(const_cast<Stmt *>(Body));
  return !Loops.empty() && F.References == F.InLoops;
}

/// Whether what a loop's body does could reach a model: a backward, any model (variable, member
/// or parameter of a module type) named in it, or a call into the program's own code (which may
/// use one out of sight).
bool feedsModel(const Stmt *Body, const ProgramFacts::EditablePredicate &IsEditable) {
  if (containsBackward(Body))
    return true;
  struct Finder : RecursiveASTVisitor<Finder> {
    const ProgramFacts::EditablePredicate *IsEditable;
    bool Found = false;
    bool VisitCallExpr(CallExpr *Call) {
      const Decl *Callee = Call->getCalleeDecl();
      Found = Found || !Callee || (*IsEditable)(Callee->getLocation());
      return !Found;
    }
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      Found = Found || isModule(Ref->getType().getNonReferenceType());
      return !Found;
    }
    bool VisitMemberExpr(MemberExpr *Member) {
      Found = Found || isModule(Member->getType().getNonReferenceType());
      return !Found;
    }
  } F;
  F.IsEditable = &IsEditable;
  F.TraverseStmt(const_cast<Stmt *>(Body));
  return F.Found;
}

} // namespace

void ProgramFacts::resolveLoaderFactories(const ProgramSummary &OtherFiles) {
  // A loader got from a function that returns one it prepares is a prepared loader here.
  for (const auto &[Loader, Callee] : LoadersFromCalls) {
    const std::string Usr = usrOf(patternOf(Callee));
    if (!Usr.empty() && (LoaderFactoryUsrs.count(Usr) || OtherFiles.LoaderFactories.count(Usr))) {
      Prepared.insert(Loader);
      LoaderSet.insert(Loader);
    }
  }
}

void ProgramFacts::setAsideLoadersFeedingNoModel(const EditablePredicate &IsEditable) {
  llvm::erase_if(Loaders, [&](const VarDecl *Loader) {
    const auto *Fn = dyn_cast_or_null<FunctionDecl>(Loader->getParentFunctionOrMethod());
    std::vector<const CXXForRangeStmt *> Loops;
    if (!Fn || !Fn->getBody() || !onlyLoopsOver(Loader, Fn->getBody(), Loops))
      return false;
    if (llvm::any_of(Loops, [&](const CXXForRangeStmt *Loop) {
          return feedsModel(Loop->getBody(), IsEditable);
        }))
      return false;
    LoadersFeedingNoModel.push_back(Loader);
    LoaderSet.erase(Loader);
    return true;
  });
}

void ProgramFacts::resolveTrainedParameters(const ProgramSummary &OtherFiles,
                                            const EditablePredicate &IsEditable) {
  // Functions of other files that train the model a call here passes them: what the call passes
  // is a model, or a trained parameter in turn.
  if (!OtherFiles.TrainedModelParameters.empty())
    for (const auto &[Callee, Sites] : Calls) {
      if (!IsEditable(Callee->getLocation()))
        continue; // a library function
      const std::string CalleeUsr = usrOf(Callee);
      for (const auto &[Usr, Index] : OtherFiles.TrainedModelParameters)
        if (CalleeUsr == Usr)
          for (const CallExpr *Call : Sites)
            noteModelArgument(Call, Index, IsEditable);
    }
  // A model that a function trains is prepared where its caller creates it: each call passes
  // one, which is a model of the caller (or, passed on from the caller's own parameter, a
  // trained parameter in turn). A worklist, since the list grows as calls are followed.
  for (size_t I = 0; I < TrainedParameters.size(); ++I) {
    const ParmVarDecl *Model = TrainedParameters[I].Model;
    const auto *Fn = dyn_cast<FunctionDecl>(Model->getDeclContext());
    if (!Fn)
      continue;
    const std::string Usr = usrOf(patternOf(Fn));
    const unsigned Index = Model->getFunctionScopeIndex();
    if (!Usr.empty())
      Summary.TrainedModelParameters.insert({Usr, Index});
    const auto &Sites = callsTo(Fn);
    for (const CallExpr *Call : Sites)
      noteModelArgument(Call, Index, IsEditable);
    // No caller in sight: the function prepares what it is given, unless it was migrated already
    // (it names an accelerator: that migration prepared the model, here or in its caller).
    if (Sites.empty() && (Usr.empty() || !OtherFiles.called(Usr)) && acceleratorIn(Fn).empty())
      ParametersToPrepare.push_back(TrainedParameters[I]);
  }
}

void ProgramFacts::noteModelArgument(const CallExpr *Call, unsigned Index,
                                     const EditablePredicate &IsEditable) {
  // Operator calls count the object as an argument; parameter indices do not.
  if (isa<CXXOperatorCallExpr>(Call) || Index >= Call->getNumArgs())
    return;
  const ValueDecl *Arg = rootDecl(Call->getArg(Index));
  if (!Arg || !isModule(Arg->getType()) || !IsEditable(Arg->getLocation()))
    return;
  if (const auto *Parameter = dyn_cast<ParmVarDecl>(Arg)) {
    if (TrainedParameterSet.insert(Parameter).second)
      TrainedParameters.push_back({Parameter, nullptr});
  } else if (const auto *Model = dyn_cast<VarDecl>(Arg)) {
    if (Model->isLocalVarDecl() && ModelSet.insert(Model).second)
      Models.push_back(Model);
  } else if (const auto *Member = dyn_cast<FieldDecl>(Arg)) {
    if (ModelSet.insert(Member).second)
      MemberModels.push_back(Member);
  }
}

const ValueDecl *ProgramFacts::canonical(const ValueDecl *D) {
  return D ? cast<ValueDecl>(D->getCanonicalDecl()) : nullptr;
}

const std::vector<const CallExpr *> &ProgramFacts::callsTo(const FunctionDecl *Fn) const {
  static const std::vector<const CallExpr *> None;
  auto It = Calls.find(patternOf(Fn));
  return It == Calls.end() ? None : It->second;
}

const std::vector<const Expr *> &ProgramFacts::assignmentsOf(const FieldDecl *F) const {
  static const std::vector<const Expr *> None;
  auto It = MemberAssignments.find(F);
  return It == MemberAssignments.end() ? None : It->second;
}

const std::vector<const Stmt *> &ProgramFacts::assignmentStatementsOf(const FieldDecl *F) const {
  static const std::vector<const Stmt *> None;
  auto It = MemberAssignmentStatements.find(F);
  return It == MemberAssignmentStatements.end() ? None : It->second;
}

const std::vector<ProgramFacts::MemberInitializer> &
ProgramFacts::initializersOf(const FieldDecl *F) const {
  static const std::vector<MemberInitializer> None;
  auto It = MemberInitializers.find(F);
  return It == MemberInitializers.end() ? None : It->second;
}

std::string ProgramFacts::acceleratorIn(const FunctionDecl *Fn) const {
  if (auto It = AcceleratorNames.find(patternOf(Fn)); It != AcceleratorNames.end())
    return It->second;
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Fn); Method && !Method->isStatic())
    return acceleratorMemberOf(Method->getParent());
  return {};
}

std::string ProgramFacts::acceleratorMemberOf(const CXXRecordDecl *RD) const {
  auto It = AcceleratorMembers.find(RD->getCanonicalDecl());
  return It == AcceleratorMembers.end() ? std::string() : It->second;
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
           (TrainedParameterSet.count(P) ||
            isBoundParam(
                P, [this](const ValueDecl *A, unsigned N) { return preparedModel(A, N); }, Depth));
  return ModelSet.count(D) || (Prepared.count(canonical(D)) && isModule(D->getType()));
}

bool ProgramFacts::preparedLoader(const ValueDecl *D, unsigned Depth) const {
  if (!D)
    return false;
  if (const auto *P = dyn_cast<ParmVarDecl>(D))
    return isBoundParam(
        P, [this](const ValueDecl *A, unsigned N) { return preparedLoader(A, N); }, Depth);
  return LoaderSet.count(D);
}

bool ProgramFacts::isPreparedModel(const ValueDecl *D) const { return preparedModel(D, 0); }
bool ProgramFacts::isPreparedLoader(const ValueDecl *D) const { return preparedLoader(D, 0); }

} // namespace accel::migrate
