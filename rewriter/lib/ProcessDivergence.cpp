//===- ProcessDivergence.cpp ----------------------------------------------------------------===//
#include "ProcessDivergence.h"

#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/AST/StmtCXX.h"

#include "accel_common/accelerator_methods.h"

using namespace clang;
using llvm::StringRef;

namespace accel::migrate {

namespace {

// What each Accelerator method does across processes: the table the runtime names its calls
// from (accel_common/accelerator_methods.h). Identity methods name this process or hand it its
// own part of the data; combining ones give every process the same result; collective ones (and
// combining ones) must be called by every process. Forward, backward and clipping count as
// collective: the strategy (and with it whether they communicate) is chosen at launch, not in the
// source.
bool hasRole(StringRef Name, contract::MethodRole Role) {
  return contract::has_role(std::string_view(Name.data(), Name.size()), Role);
}
bool isCollectiveMethod(StringRef Name) {
  return contract::is_collective_method(std::string_view(Name.data(), Name.size()));
}

StringRef methodName(const CallExpr *Call) {
  const auto *MC = dyn_cast<CXXMemberCallExpr>(Call);
  return MC && MC->getMethodDecl() ? plainName(MC->getMethodDecl()) : StringRef();
}

bool isTensorMethod(const CallExpr *Call, StringRef Name) {
  const auto *MC = dyn_cast<CXXMemberCallExpr>(Call);
  if (!MC || !MC->getMethodDecl() || plainName(MC->getMethodDecl()) != Name)
    return false;
  return isTensor(QualType(MC->getMethodDecl()->getParent()->getTypeForDecl(), 0));
}

bool isScalar(QualType T) {
  T = T.getNonReferenceType().getCanonicalType();
  return T->isArithmeticType() || T->isEnumeralType() || T->isPointerType();
}

// Calls anywhere in S, lambdas included (a lambda's call is made where it is defined, as far as
// this analysis can tell).
template <typename Fn> void forEachCall(const Stmt *S, Fn &&Visit) {
  struct Finder : RecursiveASTVisitor<Finder> {
    Fn &Visit;
    explicit Finder(Fn &Visit) : Visit(Visit) {}
    bool VisitCallExpr(CallExpr *CE) {
      Visit(static_cast<const CallExpr *>(CE));
      return true;
    }
  } F(Visit);
  F.TraverseStmt(const_cast<Stmt *>(S));
}

// The objects (not scalars) an expression reads: variables, parameters and this class's members.
void objectsRead(const Expr *E, llvm::SmallVectorImpl<const Decl *> &Out) {
  struct Finder : RecursiveASTVisitor<Finder> {
    llvm::SmallVectorImpl<const Decl *> &Out;
    explicit Finder(llvm::SmallVectorImpl<const Decl *> &Out) : Out(Out) {}
    bool VisitDeclRefExpr(DeclRefExpr *DRE) {
      if (const auto *V = dyn_cast<VarDecl>(DRE->getDecl()))
        if (!isScalar(V->getType()) && !V->getType().isConstQualified())
          Out.push_back(V->getCanonicalDecl());
      return true;
    }
    bool VisitMemberExpr(MemberExpr *ME) {
      if (isa<CXXThisExpr>(ME->getBase()->IgnoreParenImpCasts()))
        if (const auto *F = dyn_cast<FieldDecl>(ME->getMemberDecl()))
          if (!isScalar(F->getType()))
            Out.push_back(F);
      return true;
    }
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  } F(Out);
  F.TraverseStmt(const_cast<Expr *>(E));
}

// How a report names a function: a lambda by where it is written.
std::string functionName(const FunctionDecl *Fn,
                         const std::function<std::string(SourceLocation)> &Where) {
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Fn); Method && Method->getParent()->isLambda())
    return "the lambda at " + Where(Method->getParent()->getBeginLoc());
  return Fn->getNameAsString() + "()";
}

const Decl *targetOf(const Expr *E) {
  const ValueDecl *D = rootDecl(E);
  return D ? D->getCanonicalDecl() : nullptr;
}

} // namespace

ProcessDivergence::ProcessDivergence(const ProgramFacts &Facts,
                                     const std::vector<const FunctionDecl *> &Functions,
                                     const ProgramSummary &OtherFiles, FileOf Where,
                                     const std::set<const Decl *> &Reduced)
    : Facts(Facts), OtherFiles(OtherFiles), Where(std::move(Where)), Functions(Functions) {
  Combined.insert(Reduced.begin(), Reduced.end());
  for (const FunctionDecl *Fn : Functions)
    collectFlows(Fn);
  solve();
}

std::string ProcessDivergence::where(SourceLocation Loc) const { return Where(Loc); }

// Where values go: initializations, assignments, arguments to parameters, returned values, and
// the conditions each is made under (a flag set only inside `if (is_main_process())` differs
// between processes as much as the call does).
/// Walks a function's body for its flows: each assignment, initialisation, argument passed,
/// value returned or range iterated, with the conditions it is under.
class ProcessDivergence::FlowCollector {
public:
  FlowCollector(std::vector<Flow> &Flows, llvm::DenseSet<const Decl *> &LocalObjects)
      : Flows(Flows), LocalObjects(LocalObjects) {}

  /// S and what it contains; Owner: the function (or lambda) whose returns S's are.
  void walk(const Stmt *S, const FunctionDecl *Owner) {
    if (!S || walkBranch(S, Owner))
      return;
    recordAssignment(S, Owner);
    if (const auto *Call = dyn_cast<CallExpr>(S))
      recordCall(Call);
    if (const auto *Lambda = dyn_cast<LambdaExpr>(S))
      return walk(Lambda->getBody(), Lambda->getCallOperator()); // its returns are its calls'
    for (const Stmt *Child : S->children())
      walk(Child, Owner);
  }

private:
  void add(const Decl *Target, const Expr *Source, SourceLocation Loc) {
    if (Target && Source)
      Flows.push_back(Flow{Target, Source, Conditions, Loc});
  }

  /// Cond, then Body under it.
  void under(const Expr *Cond, std::initializer_list<const Stmt *> Body,
             const FunctionDecl *Owner) {
    walk(Cond, Owner);
    Conditions.push_back(Cond);
    for (const Stmt *B : Body)
      walk(B, Owner);
    Conditions.pop_back();
  }

  /// A branch or a loop, walked with its condition over its body; false for anything else.
  bool walkBranch(const Stmt *S, const FunctionDecl *Owner) {
    if (const auto *If = dyn_cast<IfStmt>(S)) {
      walk(If->getInit(), Owner);
      walk(If->getConditionVariableDeclStmt(), Owner);
      under(If->getCond(), {If->getThen(), If->getElse()}, Owner);
    } else if (const auto *While = dyn_cast<WhileStmt>(S)) {
      under(While->getCond(), {While->getBody()}, Owner);
    } else if (const auto *Do = dyn_cast<DoStmt>(S)) {
      under(Do->getCond(), {Do->getBody()}, Owner);
    } else if (const auto *For = dyn_cast<ForStmt>(S)) {
      walk(For->getInit(), Owner);
      if (For->getCond()) {
        under(For->getCond(), {For->getBody(), For->getInc()}, Owner);
      } else {
        walk(For->getBody(), Owner);
        walk(For->getInc(), Owner);
      }
    } else if (const auto *Range = dyn_cast<CXXForRangeStmt>(S)) {
      // A data loader's batches: each process reads its own share of the dataset.
      if (isDataLoader(Range->getRangeInit()->getType()))
        LocalObjects.insert(Range->getLoopVariable()->getCanonicalDecl());
      add(Range->getLoopVariable()->getCanonicalDecl(), Range->getRangeInit(),
          Range->getBeginLoc());
      under(Range->getRangeInit(), {Range->getBody()}, Owner);
    } else if (const auto *Switch = dyn_cast<SwitchStmt>(S)) {
      under(Switch->getCond(), {Switch->getBody()}, Owner);
    } else if (const auto *Cond = dyn_cast<ConditionalOperator>(S)) {
      under(Cond->getCond(), {Cond->getTrueExpr(), Cond->getFalseExpr()}, Owner);
    } else if (const auto *BO = dyn_cast<BinaryOperator>(S); BO && BO->isLogicalOp()) {
      under(BO->getLHS(), {BO->getRHS()}, Owner);
    } else {
      return false;
    }
    return true;
  }

  /// `x = v`, `T x = v`, `return v`: v flows into x (into Owner's value, for a return).
  void recordAssignment(const Stmt *S, const FunctionDecl *Owner) {
    if (const auto *BO = dyn_cast<BinaryOperator>(S); BO && BO->isAssignmentOp())
      add(targetOf(BO->getLHS()), BO->getRHS(), BO->getOperatorLoc());
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(S))
      if (Op->isAssignmentOp() && Op->getNumArgs() == 2)
        add(targetOf(Op->getArg(0)), Op->getArg(1), Op->getOperatorLoc());
    if (const auto *DS = dyn_cast<DeclStmt>(S))
      for (const Decl *D : DS->decls())
        if (const auto *Var = dyn_cast<VarDecl>(D))
          add(Var->getCanonicalDecl(), Var->getInit(), Var->getLocation());
    if (const auto *Return = dyn_cast<ReturnStmt>(S); Return && Owner)
      add(Owner->getCanonicalDecl(), Return->getRetValue(), Return->getBeginLoc());
  }

  /// Arguments become the callee's parameters; a mutating method's arguments become part of its
  /// object (`scores.push_back(accuracy)`).
  void recordCall(const CallExpr *Call) {
    const FunctionDecl *Callee = Call->getDirectCallee();
    if (!Callee)
      return;
    if (const FunctionDecl *Def = Callee->getDefinition()) {
      const unsigned Offset = isa<CXXOperatorCallExpr>(Call) && isa<CXXMethodDecl>(Def) ? 1 : 0;
      for (unsigned I = Offset; I < Call->getNumArgs() && I - Offset < Def->getNumParams(); ++I)
        add(Def->getParamDecl(I - Offset)->getCanonicalDecl(), Call->getArg(I),
            Call->getArg(I)->getBeginLoc());
    }
    const auto *Method = dyn_cast<CXXMethodDecl>(Callee);
    const auto *MC = dyn_cast<CXXMemberCallExpr>(Call);
    if (Method && MC && !Method->isConst() && !isAcceleratorMethod(Method))
      for (const Expr *Arg : Call->arguments())
        add(targetOf(MC->getImplicitObjectArgument()), Arg, Call->getBeginLoc());
  }

  std::vector<Flow> &Flows;
  llvm::DenseSet<const Decl *> &LocalObjects;
  std::vector<const Expr *> Conditions; // the conditions around the statement being walked
};

void ProcessDivergence::collectFlows(const FunctionDecl *Fn) {
  FlowCollector(Flows, LocalObjects).walk(Fn->getBody(), Fn);
}

void ProcessDivergence::solve() {
  for (const Flow &F : Flows)
    if (combinesProcesses(F.Source))
      Combined.insert(F.Target);
  // Values that differ between processes, and why; objects computed from this process's data.
  for (bool Changed = true; Changed;) {
    Changed = false;
    for (const Flow &F : Flows) {
      if (Combined.count(F.Target))
        continue;
      if (!LocalObjects.count(F.Target) && isLocalTensor(F.Source)) {
        LocalObjects.insert(F.Target);
        Changed = true;
      }
      if (Tainted.count(F.Target))
        continue;
      std::string Why = perProcess(F.Source);
      for (const Expr *Cond : F.Conditions) {
        if (!Why.empty())
          break;
        Why = perProcess(Cond);
      }
      if (Why.empty())
        continue;
      Tainted[F.Target] = Why;
      Changed = true;
    }
  }
  // Functions that reach a collective, and through which call.
  for (bool Changed = true; Changed;) {
    Changed = false;
    for (const FunctionDecl *Fn : Functions) {
      const FunctionDecl *Key = Fn->getCanonicalDecl();
      if (CollectiveFunctions.count(Key))
        continue;
      std::string Reached;
      forEachCall(Fn->getBody(), [&](const CallExpr *Call) {
        if (!Reached.empty())
          return;
        std::string What = directCollective(Call);
        if (What.empty())
          if (const FunctionDecl *Callee = Call->getDirectCallee())
            if (CollectiveFunctions.count(Callee->getCanonicalDecl()))
              What = functionName(Callee, Where);
        if (!What.empty())
          Reached = What + " at " + where(Call->getBeginLoc());
      });
      if (!Reached.empty()) {
        CollectiveFunctions[Key] = Reached;
        Changed = true;
      }
    }
  }
}

bool ProcessDivergence::combinesProcesses(const Expr *E) const {
  bool Found = false;
  forEachCall(E, [&](const CallExpr *Call) {
    Found = Found || (isAcceleratorMethodCall(Call) &&
                      hasRole(methodName(Call), contract::MethodRole::combining));
  });
  return Found;
}

bool ProcessDivergence::isLocalTensor(const Expr *E) const {
  if (combinesProcesses(E))
    return false;
  if (!perProcess(E).empty())
    return true;
  llvm::SmallVector<const Decl *, 4> Read;
  objectsRead(E, Read);
  return llvm::any_of(Read, [&](const Decl *D) { return LocalObjects.count(D) != 0; });
}

std::string ProcessDivergence::perProcess(const Expr *E) const {
  if (!E)
    return {};
  E = E->IgnoreParenImpCasts();
  if (isa<LambdaExpr>(E))
    return {};
  auto children = [&]() -> std::string {
    for (const Stmt *Child : E->children())
      if (const auto *ChildExpr = dyn_cast_or_null<Expr>(Child))
        if (std::string Why = perProcess(ChildExpr); !Why.empty())
          return Why;
    return {};
  };
  if (const auto *DRE = dyn_cast<DeclRefExpr>(E)) {
    auto It = Tainted.find(DRE->getDecl()->getCanonicalDecl());
    if (It == Tainted.end())
      return {};
    return "`" + DRE->getDecl()->getNameAsString() + "`, which comes from " + It->second;
  }
  if (const auto *ME = dyn_cast<MemberExpr>(E)) {
    auto It = Tainted.find(ME->getMemberDecl()->getCanonicalDecl());
    if (It != Tainted.end())
      return "`" + ME->getMemberDecl()->getNameAsString() + "`, which comes from " + It->second;
    return perProcess(ME->getBase());
  }
  if (const auto *Call = dyn_cast<CallExpr>(E)) {
    if (isAcceleratorMethodCall(Call)) {
      const StringRef Name = methodName(Call);
      return hasRole(Name, contract::MethodRole::identity) ? Name.str() + "()" : std::string();
    }
    if (isTensorMethod(Call, "item")) {
      const Expr *Object = cast<CXXMemberCallExpr>(Call)->getImplicitObjectArgument();
      if (isLocalTensor(Object))
        return "item() at " + where(Call->getBeginLoc()) +
               ", read from a tensor computed from this process's own batches (not gathered or "
               "reduced)";
      return {};
    }
    const FunctionDecl *Callee = Call->getDirectCallee();
    if (Callee && Callee->getDefinition() && !Callee->getDefinition()->isInStdNamespace()) {
      // A user function: its parameters took the arguments (Flows); what it returns is its own.
      auto It = Tainted.find(Callee->getCanonicalDecl());
      if (It != Tainted.end())
        return functionName(Callee, Where) + ", which returns " + It->second;
      if (const auto *MC = dyn_cast<CXXMemberCallExpr>(Call))
        return perProcess(MC->getImplicitObjectArgument());
      return {};
    }
    return children();
  }
  return children();
}

std::string ProcessDivergence::directCollective(const CallExpr *Call) const {
  if (isAcceleratorMethodCall(Call)) {
    const StringRef Name = methodName(Call);
    return isCollectiveMethod(Name) ? Name.str() + "()" : std::string();
  }
  if (isTensorMethod(Call, "backward"))
    return "backward()";
  // A prepared model's forward: `model(x)` or `model->forward(x)`.
  const Expr *Model = nullptr;
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call);
      Op && Op->getOperator() == OO_Call && Op->getNumArgs() >= 1)
    Model = Op->getArg(0);
  else if (const auto *MC = dyn_cast<CXXMemberCallExpr>(Call); MC && methodName(Call) == "forward")
    Model = MC->getImplicitObjectArgument();
  if (!Model || !isModule(Model->getType()))
    return {};
  const ValueDecl *D = rootDecl(Model);
  if (D && (Facts.alreadyPrepared(D) || Facts.isPreparedModel(D)))
    return "the forward of the prepared model `" + D->getNameAsString() + "`";
  return {};
}

std::string ProcessDivergence::collective(const CallExpr *Call) const {
  if (std::string What = directCollective(Call); !What.empty())
    return What;
  const FunctionDecl *Callee = Call->getDirectCallee();
  if (!Callee)
    return {};
  if (auto It = CollectiveFunctions.find(Callee->getCanonicalDecl());
      It != CollectiveFunctions.end())
    return functionName(Callee, Where) + ", which reaches " + It->second + ",";
  if (Callee->getDefinition())
    return {};
  if (auto It = OtherFiles.Collectives.find(usrOf(Callee)); It != OtherFiles.Collectives.end())
    return functionName(Callee, Where) + ", which reaches " + It->second + ",";
  return {};
}

std::map<std::string, std::string> ProcessDivergence::exportedCollectives() const {
  std::map<std::string, std::string> Out;
  for (const auto &[Fn, Reached] : CollectiveFunctions)
    if (std::string Usr = usrOf(Fn); !Usr.empty())
      Out.emplace(std::move(Usr), Reached);
  return Out;
}

} // namespace accel::migrate
