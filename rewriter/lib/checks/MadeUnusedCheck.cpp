//===- MadeUnusedCheck.cpp ------------------------------------------------------------------===//
#include "MadeUnusedCheck.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Basic/CharInfo.h"
#include "clang/Basic/SourceManager.h"

#include <map>

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

/// `v = value;` as a statement of its own, with a value that has no side effects: a write that
/// can go with v.
const DeclRefExpr *plainAssignmentTarget(const Stmt *S, const ASTContext &Ctx) {
  const Expr *Target = nullptr, *Value = nullptr;
  if (const auto *BO = dyn_cast<BinaryOperator>(S); BO && BO->getOpcode() == BO_Assign) {
    Target = BO->getLHS();
    Value = BO->getRHS();
  } else if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(S);
             Op && Op->getOperator() == OO_Equal && Op->getNumArgs() == 2) {
    Target = Op->getArg(0);
    Value = Op->getArg(1);
  }
  if (!Target || Value->HasSideEffects(Ctx))
    return nullptr;
  return dyn_cast<DeclRefExpr>(Target->IgnoreParenImpCasts());
}

// Whether Text names a variable called Word: the identifier, not a member of that name
// (`accelerator.device()` does not read a variable `device`).
bool containsWord(llvm::StringRef Text, llvm::StringRef Word) {
  for (size_t At = Text.find(Word); At != llvm::StringRef::npos; At = Text.find(Word, At + 1)) {
    const llvm::StringRef Left = Text.take_front(At).rtrim();
    const bool Before = (At > 0 && isAsciiIdentifierContinue(Text[At - 1])) || Left.endswith(".") ||
                        Left.endswith("->") || Left.endswith("::");
    const size_t End = At + Word.size();
    const bool After = End < Text.size() && isAsciiIdentifierContinue(Text[End]);
    if (!Before && !After)
      return true;
  }
  return false;
}

/// The variables of one function and every place its code names them.
struct Uses {
  std::map<const VarDecl *, std::vector<const DeclRefExpr *>> Refs;
  // The target of a plain assignment -> the assignment when it is a statement of a block (it
  // can go), or null when it is the whole branch or body of an if or a loop (it cannot).
  std::map<const DeclRefExpr *, const Stmt *> Writes;
  std::vector<const VarDecl *> Order; // variables in order of declaration
};

Uses usesIn(const FunctionDecl *Fn, const ASTContext &Ctx) {
  struct Collector : RecursiveASTVisitor<Collector> {
    const FunctionDecl *Fn;
    const ASTContext *Ctx;
    Uses *Out;
    bool owned(const VarDecl *V) const {
      if (const auto *P = dyn_cast<ParmVarDecl>(V))
        return P->getDeclContext() == Fn;
      return V->isLocalVarDecl() && !V->isStaticLocal() && V->getParentFunctionOrMethod() == Fn;
    }
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      if (const auto *V = dyn_cast<VarDecl>(Ref->getDecl()); V && owned(V))
        Out->Refs[V].push_back(Ref);
      return true;
    }
    bool VisitCompoundStmt(CompoundStmt *Block) {
      for (const Stmt *S : Block->body())
        if (const DeclRefExpr *Target = plainAssignmentTarget(S, *Ctx))
          Out->Writes[Target] = S;
      return true;
    }
    void lone(const Stmt *S) {
      if (const DeclRefExpr *Target = S ? plainAssignmentTarget(S, *Ctx) : nullptr)
        Out->Writes[Target] = nullptr;
    }
    bool VisitIfStmt(IfStmt *If) {
      lone(If->getThen());
      lone(If->getElse());
      return true;
    }
    bool VisitForStmt(ForStmt *Loop) {
      lone(Loop->getBody());
      return true;
    }
    bool VisitWhileStmt(WhileStmt *Loop) {
      lone(Loop->getBody());
      return true;
    }
    bool VisitVarDecl(VarDecl *V) {
      if (owned(V) && !isa<DecompositionDecl>(V))
        Out->Order.push_back(V);
      return true;
    }
  } C;
  Uses Out;
  C.Fn = Fn;
  C.Ctx = &Ctx;
  C.Out = &Out;
  C.TraverseDecl(const_cast<FunctionDecl *>(Fn));
  return Out;
}

} // namespace

void MadeUnusedCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(functionDecl(isDefinition(), unless(isInstantiated())).bind("fn"), this);
}

void MadeUnusedCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Fn = Result.Nodes.getNodeAs<FunctionDecl>("fn");
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Fn); Method && Method->getParent()->isLambda())
    return; // its variables are its enclosing function's business
  if (Context.isEditable(Fn->getLocation()) &&
      std::find(Functions.begin(), Functions.end(), Fn) == Functions.end())
    Functions.push_back(Fn);
}

/// What the migration's edits so far did to the text of the functions this check looks at.
class MadeUnusedCheck::MadeEdits {
public:
  explicit MadeEdits(MigrationContext &Context) : Context(Context), SM(Context.sourceManager()) {}

  /// A read the migration has rewritten away: inside text another transformation replaced, whose
  /// new text does not name the variable.
  bool rewrittenAway(const DeclRefExpr *Ref) const {
    if (Ref->getLocation().isMacroID())
      return false;
    const std::string Name = Ref->getDecl()->getName().str();
    return anyEdit(
        Ref->getLocation(), Ref->getLocation(), [&](const Edit &E, unsigned From, unsigned) {
          return E.Length > 0 && E.Offset <= From && From + Name.size() <= E.Offset + E.Length &&
                 !containsWord(E.Text, Name);
        });
  }
  /// Whether any edit touches the statement S.
  bool touched(const Stmt *S) const {
    return anyEdit(S->getBeginLoc(), Context.source().afterStatement(S),
                   [](const Edit &E, unsigned From, unsigned To) {
                     return E.Offset < To && From < E.Offset + std::max(E.Length, 1u);
                   });
  }
  /// Whether the device transformation replaced all of E.
  bool replacedByDevice(const Expr *E) const {
    return anyEdit(E->getBeginLoc(), E->getEndLoc(),
                   [](const Edit &Ed, unsigned From, unsigned To) {
                     return Ed.Check == "device" && Ed.Offset <= From && To < Ed.Offset + Ed.Length;
                   });
  }
  /// Whether new text inside Fn names the variable (`gather_for_metrics(output, targets)`).
  bool namedByNewText(const FunctionDecl *Fn, llvm::StringRef Name) const {
    return anyEdit(Fn->getBeginLoc(), Fn->getEndLoc(),
                   [&](const Edit &E, unsigned From, unsigned To) {
                     return E.Offset >= From && E.Offset <= To && containsWord(E.Text, Name);
                   });
  }

private:
  /// Whether an edit of the file holding [Begin, End] satisfies Holds(Edit, From, To), From and
  /// To being the range's offsets in that file.
  template <typename Predicate>
  bool anyEdit(SourceLocation Begin, SourceLocation End, Predicate Holds) const {
    Begin = SM.getFileLoc(Begin);
    const FileResult *File = Context.resultFor(Context.source().pathOf(Begin));
    const unsigned From = SM.getFileOffset(Begin), To = SM.getFileOffset(SM.getFileLoc(End));
    return File &&
           llvm::any_of(File->Edits.edits(), [&](const Edit &E) { return Holds(E, From, To); });
  }

  MigrationContext &Context;
  const SourceManager &SM;
};

void MadeUnusedCheck::finish() {
  const MadeEdits Edits(Context);
  for (const FunctionDecl *Fn : Functions) {
    const Uses U = usesIn(Fn, Context.ast());
    for (const VarDecl *Var : U.Order) {
      auto It = U.Refs.find(Var);
      if (It == U.Refs.end())
        continue; // unused in the original too: not the migration's doing
      std::vector<const Stmt *> Writes;
      bool Gone = false, Read = false;
      for (const DeclRefExpr *Ref : It->second) {
        if (auto W = U.Writes.find(Ref); W != U.Writes.end())
          Writes.push_back(W->second);
        else if (Edits.rewrittenAway(Ref))
          Gone = true;
        else
          Read = true;
      }
      if (Read || !Gone || Edits.namedByNewText(Fn, Var->getName()))
        continue;
      settle(Var, Writes, Edits);
    }
  }
}

void MadeUnusedCheck::settle(const VarDecl *Var, const std::vector<const Stmt *> &Writes,
                             const MadeEdits &Edits) {
  const std::string Name = Var->getName().str();
  const auto *Param = dyn_cast<ParmVarDecl>(Var);
  if (Param && Writes.empty() && !Param->getLocation().isMacroID() &&
      Context.canEdit(this->Name, SourceRange(Param->getLocation()))) {
    // The parameter stays (callers pass it); its name goes, so the compiler sees it unused on
    // purpose.
    Context.replace(this->Name, SourceRange(Param->getLocation()), "/*" + Name + "*/");
    Context.applied(this->Name, Param->getLocation());
    return;
  }
  const auto *Declaration = dyn_cast_or_null<DeclStmt>(
      Param ? nullptr : Context.ast().getParentMapContext().getParents(*Var)[0].get<DeclStmt>());
  // An initializer the device transformation replaced is `accelerator.device()` now: what the
  // original one did (cuda::is_available()) is gone already.
  const Expr *Init = Var->getInit();
  const bool InitIsDevice = Init && Edits.replacedByDevice(Init);
  auto touched = [&](const Stmt *S) { return Edits.touched(S); };
  const bool Removable =
      Declaration && Declaration->isSingleDecl() &&
      (!Init || InitIsDevice || !Init->HasSideEffects(Context.ast())) &&
      llvm::all_of(Writes, [](const Stmt *W) { return W != nullptr; }) &&
      (InitIsDevice || !touched(Declaration)) && llvm::none_of(Writes, touched) &&
      Context.canEdit(this->Name, Declaration->getSourceRange()) &&
      llvm::all_of(Writes,
                   [&](const Stmt *W) { return Context.canEdit(this->Name, W->getSourceRange()); });
  if (!Removable) {
    // Still set where it cannot go (a flag set in an argument loop): marked, so that the migrated
    // program warns no more than the original (-Wunused-but-set-variable).
    const bool Mark = Declaration && !Param && !touched(Declaration) &&
                      Context.canEdit(this->Name, SourceRange(Declaration->getBeginLoc()));
    if (Mark) {
      Context.insert(this->Name, Declaration->getBeginLoc(), "[[maybe_unused]] ");
      Context.applied(this->Name, Var->getLocation());
    }
    warn(Var->getLocation(), "'" + Name + "' is no longer used after the migration" +
                                 (Mark ? " (marked [[maybe_unused]])" : "") +
                                 "; remove it if nothing else needs it");
    return;
  }
  for (const Stmt *W : Writes)
    Context.removeStatement(this->Name, W);
  Context.removeStatement(this->Name, Declaration, /*Superseding=*/InitIsDevice);
  Context.applied(this->Name, Var->getLocation());
}

} // namespace accel::migrate
