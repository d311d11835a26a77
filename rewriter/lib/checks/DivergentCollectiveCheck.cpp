//===- DivergentCollectiveCheck.cpp ---------------------------------------------------------===//
//
// Each function is walked once, statement by statement, with the causes that let only some
// processes reach the current point: a condition that differs between processes, an earlier
// early exit under such a condition, or a lambda handed to on_main_process(...). A collective
// met under a cause is reported with the innermost one. ProcessDivergence says which values
// differ and which calls communicate.
//
// A throw or a call that ends the process (exit, abort, a failed assertion) is no early exit
// here: the process fails, and the launcher stops the others; a return from main is one (the
// process ends with 0 and the others wait for it).
//
//===----------------------------------------------------------------------------------------===//
#include "DivergentCollectiveCheck.h"

#include "ProcessDivergence.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/AST/StmtCXX.h"
#include "llvm/Support/Path.h"

#include <optional>
#include <set>

using namespace clang;
using llvm::StringRef;

namespace accel::migrate {

namespace {

// Why only some processes get here.
struct Cause {
  enum Kind { Condition, EarlyExit, OnProcess } K = Condition;
  SourceLocation Condition_; // the condition (or the on_*_process call)
  std::string Why;           // what the condition depends on
  SourceLocation Exit;       // EarlyExit: the return, break or continue
  std::string ExitWord;      // "return", "break" or "continue"
  std::string OnProcessName; // OnProcess: the method ("on_main_process")
};

struct Exit {
  enum Kind { Return, Break, Continue } K;
  SourceLocation Loc;
  std::string Word;
  std::optional<Cause> Under; // set by the innermost condition that differs between processes
};

// FILE:LINE:COLUMN with the file's name alone: the report's own location gives the path.
std::string shortLocation(const SourceManager &SM, SourceLocation Loc) {
  const PresumedLoc P = SM.getPresumedLoc(SM.getExpansionLoc(Loc));
  if (P.isInvalid())
    return "?";
  return llvm::sys::path::filename(P.getFilename()).str() + ":" + std::to_string(P.getLine()) +
         ":" + std::to_string(P.getColumn());
}

class FunctionsToWalk : public RecursiveASTVisitor<FunctionsToWalk> {
public:
  explicit FunctionsToWalk(MigrationContext &Context) : Context(Context) {}
  bool shouldVisitTemplateInstantiations() const { return true; }
  bool VisitFunctionDecl(FunctionDecl *Fn) {
    if (!Fn->doesThisDeclarationHaveABody() || Fn->isDependentContext())
      return true;
    if (const auto *Method = dyn_cast<CXXMethodDecl>(Fn); Method && Method->getParent()->isLambda())
      return true; // walked where the lambda is written
    if (Context.isEditable(Context.sourceManager().getExpansionLoc(Fn->getLocation())))
      Found.push_back(Fn);
    return true;
  }
  std::vector<const FunctionDecl *> Found;

private:
  MigrationContext &Context;
};

class Walker {
public:
  Walker(MigrationContext &Context, const ProcessDivergence &Divergence, StringRef Check,
         std::set<unsigned> &Reported)
      : Context(Context), Divergence(Divergence), Check(Check), Reported(Reported) {}

  void walkFunction(const Stmt *Body) {
    std::vector<Cause> Causes;
    walk(Body, Causes);
  }

private:
  std::vector<Exit> walk(const Stmt *S, std::vector<Cause> &Causes) {
    if (!S)
      return {};
    if (const auto *Compound = dyn_cast<CompoundStmt>(S))
      return walkCompound(Compound, Causes);
    if (const auto *If = dyn_cast<IfStmt>(S)) {
      walk(If->getInit(), Causes);
      walk(If->getConditionVariableDeclStmt(), Causes);
      return branches(If->getCond(), {If->getThen(), If->getElse()}, Causes);
    }
    if (const auto *Switch = dyn_cast<SwitchStmt>(S)) {
      walk(Switch->getInit(), Causes);
      return dropExits(branches(Switch->getCond(), {Switch->getBody()}, Causes), Exit::Break);
    }
    if (const auto *While = dyn_cast<WhileStmt>(S))
      return loop(While->getCond(), While->getBody(), nullptr, Causes);
    if (const auto *Do = dyn_cast<DoStmt>(S))
      return loop(Do->getCond(), Do->getBody(), nullptr, Causes);
    if (const auto *For = dyn_cast<ForStmt>(S)) {
      walk(For->getInit(), Causes);
      return loop(For->getCond(), For->getBody(), For->getInc(), Causes);
    }
    if (const auto *Range = dyn_cast<CXXForRangeStmt>(S))
      return loop(Range->getRangeInit(), Range->getBody(), nullptr, Causes);
    if (const auto *Return = dyn_cast<ReturnStmt>(S)) {
      walk(Return->getRetValue(), Causes);
      return {Exit{Exit::Return, Return->getBeginLoc(), "return", std::nullopt}};
    }
    if (isa<BreakStmt>(S))
      return {Exit{Exit::Break, S->getBeginLoc(), "break", std::nullopt}};
    if (isa<ContinueStmt>(S))
      return {Exit{Exit::Continue, S->getBeginLoc(), "continue", std::nullopt}};
    if (const auto *E = dyn_cast<Expr>(S))
      return walkExpr(E, Causes);
    std::vector<Exit> Exits;
    for (const Stmt *Child : S->children())
      append(Exits, walk(Child, Causes));
    return Exits;
  }

  std::vector<Exit> walkCompound(const CompoundStmt *Compound, std::vector<Cause> &Causes) {
    std::vector<Exit> Exits;
    const size_t Depth = Causes.size();
    for (const Stmt *Child : Compound->body()) {
      std::vector<Exit> ChildExits = walk(Child, Causes);
      // An exit only some processes take: the rest of this block is reached by the others only.
      for (const Exit &E : ChildExits)
        if (E.Under)
          Causes.push_back(*E.Under);
      append(Exits, std::move(ChildExits));
    }
    Causes.resize(Depth);
    return Exits;
  }

  // Statements under a condition: when it differs between processes, they are reached by some,
  // and so are the exits inside them.
  std::vector<Exit> branches(const Expr *Cond, std::initializer_list<const Stmt *> Bodies,
                             std::vector<Cause> &Causes) {
    walkExpr(Cond, Causes);
    std::string Why = Divergence.perProcess(Cond);
    if (!Why.empty())
      Causes.push_back(Cause{Cause::Condition, Cond->getBeginLoc(), Why, {}, {}, {}});
    std::vector<Exit> Exits;
    for (const Stmt *Body : Bodies)
      append(Exits, walk(Body, Causes));
    if (Why.empty())
      return Exits;
    const Cause Condition = Causes.back();
    Causes.pop_back();
    for (Exit &E : Exits)
      if (!E.Under) {
        E.Under = Condition;
        E.Under->K = Cause::EarlyExit;
        E.Under->Exit = E.Loc;
        E.Under->ExitWord = E.Word;
      }
    return Exits;
  }

  std::vector<Exit> loop(const Expr *Cond, const Stmt *Body, const Expr *Inc,
                         std::vector<Cause> &Causes) {
    std::vector<Exit> Exits = branches(Cond, {Body, Inc}, Causes);
    Exits = dropExits(std::move(Exits), Exit::Break);
    return dropExits(std::move(Exits), Exit::Continue);
  }

  std::vector<Exit> walkExpr(const Expr *E, std::vector<Cause> &Causes) {
    if (!E)
      return {};
    E = E->IgnoreParens();
    if (const auto *Lambda = dyn_cast<LambdaExpr>(E)) {
      // Its body runs where it is called; taken as here. Its returns end the lambda only.
      walk(Lambda->getBody(), Causes);
      return {};
    }
    if (const auto *Cond = dyn_cast<AbstractConditionalOperator>(E)) {
      if (const auto *Plain = dyn_cast<ConditionalOperator>(Cond))
        return branches(Plain->getCond(), {Plain->getTrueExpr(), Plain->getFalseExpr()}, Causes);
    }
    if (const auto *BO = dyn_cast<BinaryOperator>(E); BO && BO->isLogicalOp())
      return branches(BO->getLHS(), {BO->getRHS()}, Causes);
    std::vector<Exit> Exits;
    if (const auto *Call = dyn_cast<CallExpr>(E)) {
      if (isOnProcessCall(Call))
        return walkOnProcess(Call, Causes);
      if (!Causes.empty())
        if (std::string What = Divergence.collective(Call); !What.empty())
          report(Call, What, Causes.back());
    }
    for (const Stmt *Child : E->children())
      append(Exits, walk(Child, Causes));
    return Exits;
  }

  static bool isOnProcessCall(const CallExpr *Call) {
    if (!isAcceleratorMethodCall(Call))
      return false;
    const StringRef Name = plainName(cast<CXXMemberCallExpr>(Call)->getMethodDecl());
    return Name == "on_main_process" || Name == "on_local_main_process" ||
           Name == "on_last_process" || Name == "on_process" || Name == "on_local_process";
  }

  std::vector<Exit> walkOnProcess(const CallExpr *Call, std::vector<Cause> &Causes) {
    const StringRef Name = plainName(cast<CXXMemberCallExpr>(Call)->getMethodDecl());
    for (const Expr *Arg : Call->arguments()) {
      if (!isa<LambdaExpr>(Arg->IgnoreParenImpCasts()->IgnoreImplicitAsWritten())) {
        walkExpr(Arg, Causes);
        continue;
      }
      Causes.push_back(Cause{Cause::OnProcess, Call->getBeginLoc(), {}, {}, {}, Name.str()});
      walkExpr(Arg, Causes);
      Causes.pop_back();
    }
    return {};
  }

  static std::vector<Exit> dropExits(std::vector<Exit> Exits, Exit::Kind K) {
    llvm::erase_if(Exits, [K](const Exit &E) { return E.K == K; });
    return Exits;
  }
  static void append(std::vector<Exit> &To, std::vector<Exit> From) {
    To.insert(To.end(), std::make_move_iterator(From.begin()), std::make_move_iterator(From.end()));
  }

  std::string at(SourceLocation Loc) const { return shortLocation(Context.sourceManager(), Loc); }

  void report(const CallExpr *Call, const std::string &What, const Cause &C) {
    const SourceLocation Loc = Context.sourceManager().getExpansionLoc(Call->getBeginLoc());
    if (!Reported.insert(Loc.getRawEncoding()).second)
      return;
    // An exit is reported at the first collective it skips: moving it fixes every later one.
    if (C.K == Cause::EarlyExit && !Reported.insert(C.Exit.getRawEncoding()).second)
      return;
    std::string Message = What + " communicates with every process, but ";
    switch (C.K) {
    case Cause::Condition:
      Message += "only the processes for which the condition at " + at(C.Condition_) +
                 " holds reach it, and that condition differs between processes (it depends on " +
                 C.Why +
                 "): the others never enter it, and the job hangs until the timeout. "
                 "Call it on every process, and keep under the condition only what does "
                 "not communicate";
      break;
    case Cause::EarlyExit:
      Message += "the " + C.ExitWord + " at " + at(C.Exit) +
                 " is taken only by the processes for which the condition at " + at(C.Condition_) +
                 " holds, which differs between processes (it depends on " + C.Why +
                 "): those never reach it, and the others wait in it until the timeout. "
                 "Let every process reach it: take the exit after it, or on every process";
      break;
    case Cause::OnProcess:
      Message += "it runs inside accelerator." + C.OnProcessName + "(...) at " + at(C.Condition_) +
                 ", on one process only: the others never enter it, and the job hangs until the "
                 "timeout. Call it outside, on every process, and keep inside only what does not "
                 "communicate";
      break;
    }
    // The usual source of the mistake: saving the way a one-process program saves.
    if (StringRef(What).startswith("save_state()") || StringRef(What).startswith("save_model()"))
      Message += " (" + What.substr(0, What.find('(')) +
                 "() writes its files from the main process alone already)";
    Context.refuse(Check, Loc, Message);
  }

  MigrationContext &Context;
  const ProcessDivergence &Divergence;
  StringRef Check;
  std::set<unsigned> &Reported;
};

} // namespace

void DivergentCollectiveCheck::finish() {
  FunctionsToWalk Functions(Context);
  Functions.TraverseAST(Context.ast());
  const ProcessDivergence Divergence(
      Context.facts(), Functions.Found, Context.options().OtherFiles,
      [this](SourceLocation Loc) { return shortLocation(Context.sourceManager(), Loc); },
      Context.reducedVariables());
  std::set<unsigned> Reported;
  for (const FunctionDecl *Fn : Functions.Found)
    Walker(Context, Divergence, Name, Reported).walkFunction(Fn->getBody());
  Context.exportCollectives(Divergence.exportedCollectives());
}

} // namespace accel::migrate
