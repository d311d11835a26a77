//===- ProcessDivergence.cpp ----------------------------------------------------------------===//
#include "ProcessDivergence.h"

#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/AST/StmtCXX.h"
#include "llvm/ADT/StringSet.h"

using namespace clang;
using llvm::StringRef;

namespace accel::migrate {

namespace {

// The Accelerator's answers that name this process, or hand it its own part of the data.
const llvm::StringSet<> &identityMethods() {
  static const llvm::StringSet<> Names = {"is_main_process",     "is_local_main_process",
                                          "is_last_process",     "process_index",
                                          "local_process_index", "split_between_processes"};
  return Names;
}

// Methods whose result is the same on every process: they combine every process's values.
const llvm::StringSet<> &combiningMethods() {
  static const llvm::StringSet<> Names = {"gather",           "gather_for_metrics", "gather_object",
                                          "reduce",           "reduce_number",      "broadcast",
                                          "broadcast_object", "check_trigger"};
  return Names;
}

// Methods every process must call together. Forward, backward and clipping are always counted:
// the strategy (and with it whether they communicate) is chosen at launch, not in the source.
const llvm::StringSet<> &collectiveMethods() {
  static const llvm::StringSet<> Names = {"save_state",
                                          "load_state",
                                          "save_model",
                                          "get_state_dict",
                                          "gather",
                                          "gather_for_metrics",
                                          "gather_object",
                                          "reduce",
                                          "reduce_number",
                                          "broadcast",
                                          "broadcast_object",
                                          "pad_across_processes",
                                          "wait_for_everyone",
                                          "prepare",
                                          "prepare_model",
                                          "prepare_data_loader",
                                          "prepare_optimizer",
                                          "prepare_scheduler",
                                          "backward",
                                          "clip_grad_norm_",
                                          "check_trigger",
                                          "resume_if_possible",
                                          "main_process_first",
                                          "local_main_process_first",
                                          "join_uneven_inputs",
                                          "gather_parameters"};
  return Names;
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
                                     const ProgramSummary &OtherFiles, FileOf Where)
    : Facts(Facts), OtherFiles(OtherFiles), Where(std::move(Where)), Functions(Functions) {
  for (const FunctionDecl *Fn : Functions)
    collectFlows(Fn);
  solve();
}

std::string ProcessDivergence::where(SourceLocation Loc) const { return Where(Loc); }

// Where values go: initializations, assignments, arguments to parameters, returned values, and
// the conditions each is made under (a flag set only inside `if (is_main_process())` differs
// between processes as much as the call does).
void ProcessDivergence::collectFlows(const FunctionDecl *Fn) {
  std::vector<const Expr *> Conditions;
  auto add = [&](const Decl *Target, const Expr *Source, SourceLocation Loc) {
    if (!Target || !Source)
      return;
    Flows.push_back(Flow{Target, Source, Conditions, Loc});
  };
  std::function<void(const Stmt *, const FunctionDecl *)> Walk = [&](const Stmt *S,
                                                                     const FunctionDecl *Owner) {
    if (!S)
      return;
    auto under = [&](const Expr *Cond, std::initializer_list<const Stmt *> Body) {
      Walk(Cond, Owner);
      Conditions.push_back(Cond);
      for (const Stmt *B : Body)
        Walk(B, Owner);
      Conditions.pop_back();
    };
    if (const auto *If = dyn_cast<IfStmt>(S)) {
      Walk(If->getInit(), Owner);
      if (const auto *Var = If->getConditionVariableDeclStmt())
        Walk(Var, Owner);
      return under(If->getCond(), {If->getThen(), If->getElse()});
    }
    if (const auto *While = dyn_cast<WhileStmt>(S))
      return under(While->getCond(), {While->getBody()});
    if (const auto *Do = dyn_cast<DoStmt>(S))
      return under(Do->getCond(), {Do->getBody()});
    if (const auto *For = dyn_cast<ForStmt>(S)) {
      Walk(For->getInit(), Owner);
      if (!For->getCond())
        return Walk(For->getBody(), Owner), Walk(For->getInc(), Owner);
      return under(For->getCond(), {For->getBody(), For->getInc()});
    }
    if (const auto *Range = dyn_cast<CXXForRangeStmt>(S)) {
      // A data loader's batches: each process reads its own share of the dataset.
      if (isDataLoader(Range->getRangeInit()->getType()))
        LocalObjects.insert(Range->getLoopVariable()->getCanonicalDecl());
      add(Range->getLoopVariable()->getCanonicalDecl(), Range->getRangeInit(),
          Range->getBeginLoc());
      return under(Range->getRangeInit(), {Range->getBody()});
    }
    if (const auto *Switch = dyn_cast<SwitchStmt>(S))
      return under(Switch->getCond(), {Switch->getBody()});
    if (const auto *Cond = dyn_cast<ConditionalOperator>(S))
      return under(Cond->getCond(), {Cond->getTrueExpr(), Cond->getFalseExpr()});
    if (const auto *BO = dyn_cast<BinaryOperator>(S)) {
      if (BO->isLogicalOp())
        return under(BO->getLHS(), {BO->getRHS()});
      if (BO->isAssignmentOp())
        add(targetOf(BO->getLHS()), BO->getRHS(), BO->getOperatorLoc());
    }
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(S))
      if (Op->isAssignmentOp() && Op->getNumArgs() == 2)
        add(targetOf(Op->getArg(0)), Op->getArg(1), Op->getOperatorLoc());
    if (const auto *DS = dyn_cast<DeclStmt>(S))
      for (const Decl *D : DS->decls())
        if (const auto *Var = dyn_cast<VarDecl>(D))
          add(Var->getCanonicalDecl(), Var->getInit(), Var->getLocation());
    if (const auto *Return = dyn_cast<ReturnStmt>(S); Return && Owner)
      add(Owner->getCanonicalDecl(), Return->getRetValue(), Return->getBeginLoc());
    if (const auto *Call = dyn_cast<CallExpr>(S)) {
      // Arguments become the callee's parameters; a mutating method's arguments become part of
      // its object (`scores.push_back(accuracy)`).
      if (const FunctionDecl *Callee = Call->getDirectCallee()) {
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
    }
    if (const auto *Lambda = dyn_cast<LambdaExpr>(S))
      return Walk(Lambda->getBody(),
                  Lambda->getCallOperator()); // its returns are its calls' values
    for (const Stmt *Child : S->children())
      Walk(Child, Owner);
  };
  Walk(Fn->getBody(), Fn);
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
    Found = Found || (isAcceleratorMethodCall(Call) && combiningMethods().count(methodName(Call)));
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
      return identityMethods().count(Name) ? Name.str() + "()" : std::string();
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
    return collectiveMethods().count(Name) ? Name.str() + "()" : std::string();
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
