//===- GatherForMetricsCheck.cpp ------------------------------------------------------------===//
#include "GatherForMetricsCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"

#include "accel_common/accelerator_methods.h"

#include <map>
#include <set>

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

const Expr *bare(const Expr *E) { return stripTemporaries(E); }

// gather, gather_for_metrics or reduce: every process's tensors combined into one result
// (accel_common/accelerator_methods.h's gathers_tensors).
bool gathersTensors(const CallExpr *Call) {
  if (!isAcceleratorMethodCall(Call))
    return false;
  const auto *MC = dyn_cast<CXXMemberCallExpr>(Call);
  if (!MC || !MC->getMethodDecl())
    return false;
  const std::string Name = MC->getMethodDecl()->getNameAsString();
  const auto *Method = contract::find_accelerator_method(Name);
  return Method && Method->gathers_tensors;
}

// `x.size(0)`: a count of samples.
const Expr *countedTensor(const Expr *E) {
  const auto *Call = dyn_cast<CXXMemberCallExpr>(bare(E));
  if (!Call || !Call->getMethodDecl() || plainName(Call->getMethodDecl()) != "size" ||
      Call->getNumArgs() != 1 ||
      !isTensor(Call->getImplicitObjectArgument()->IgnoreParenImpCasts()->getType()))
    return nullptr;
  const auto *Zero = dyn_cast<IntegerLiteral>(bare(Call->getArg(0)));
  return Zero && Zero->getValue() == 0 ? Call->getImplicitObjectArgument()->IgnoreParenImpCasts()
                                       : nullptr;
}

// One evaluation loop: what its metric accumulations read, and how they are rewritten.
class EvaluationLoop {
public:
  EvaluationLoop(MigrationContext &Context, const CXXForRangeStmt *Loop)
      : Context(Context), Loop(Loop) {}

  // A tensor the metrics read per batch: a loop variable, a member of it (batch.target), or a
  // variable declared in the loop.
  bool isBatchValue(const Expr *E) const {
    E = bare(E);
    if (!isTensor(E->getType()))
      return false;
    if (const auto *Member = dyn_cast<MemberExpr>(E))
      return rootDecl(Member) == Loop->getLoopVariable();
    if (const auto *Ref = dyn_cast<DeclRefExpr>(E)) {
      if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl()))
        return Var == Loop->getLoopVariable() || (declaredInLoop(Var) && !isGathered(Var));
      // `auto [recon, mu, logvar] = model->forward(x)`: each binding is gathered as it is.
      if (const VarDecl *Decomposed = decompositionOf(Ref))
        return declaredInLoop(Decomposed) && !isGathered(Decomposed);
    }
    return false;
  }

  static const VarDecl *decompositionOf(const Expr *E) {
    if (const auto *Ref = dyn_cast<DeclRefExpr>(bare(E)))
      if (const auto *Binding = dyn_cast<BindingDecl>(Ref->getDecl()))
        return dyn_cast_or_null<VarDecl>(Binding->getDecomposedDecl());
    return nullptr;
  }

  const VarDecl *varOf(const Expr *E) const {
    if (const auto *Ref = dyn_cast<DeclRefExpr>(bare(E)))
      return dyn_cast<VarDecl>(Ref->getDecl());
    return nullptr;
  }

  // A variable computed from batch values by LibTorch operations (not placement or a view of
  // one batch value, which is gathered as it is): rewritten from the gathered tensors.
  const Expr *derivation(const VarDecl *Var) const {
    if (!Var || Var == Loop->getLoopVariable() || !Var->getInit())
      return nullptr;
    const Expr *Init = bare(Var->getInit());
    const Expr *Stripped = Init;
    while (const auto *Call = dyn_cast<CXXMemberCallExpr>(Stripped)) {
      const llvm::StringRef Method = plainName(Call->getMethodDecl());
      if (!isTensor(Call->getImplicitObjectArgument()->IgnoreParenImpCasts()->getType()) ||
          !(Method == "to" || Method == "view" || Method == "reshape" || Method == "squeeze" ||
            Method == "unsqueeze" || Method == "flatten" || Method == "contiguous" ||
            Method == "float" || Method == "toType" || Method == "cuda" || Method == "cpu"))
        break;
      Stripped = bare(Call->getImplicitObjectArgument());
    }
    if (isBatchValue(Stripped))
      return nullptr; // batch.data.to(device), a copy or a view: gathered as it is
    // Written again from gathered tensors only where it reads a tensor of the loop's (a batch
    // value, or one gathered already): one stacked by hand from this process's examples
    // (`torch::stack(targets)`, targets a std::vector) is gathered as it is.
    return isPureTensorComputation(Init) && readsLoopTensor(Init) ? Init : nullptr;
  }

  bool readsLoopTensor(const Expr *E) const {
    struct Finder : RecursiveASTVisitor<Finder> {
      const EvaluationLoop *Self;
      bool Found = false;
      bool TraverseMemberExpr(MemberExpr *ME) {
        if (isTensor(ME->getType()) && rootDecl(ME) == Self->Loop->getLoopVariable()) {
          Found = true;
          return false;
        }
        return RecursiveASTVisitor::TraverseMemberExpr(ME);
      }
      bool VisitDeclRefExpr(DeclRefExpr *Ref) {
        const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
        const VarDecl *Declared = Var ? Var : decompositionOf(Ref);
        Found = Found ||
                (isTensor(Ref->getType()) && Declared &&
                 (Declared == Self->Loop->getLoopVariable() || Self->declaredInLoop(Declared)));
        return !Found;
      }
      bool TraverseLambdaExpr(LambdaExpr *) { return true; }
    } F;
    F.Self = this;
    F.TraverseStmt(const_cast<Expr *>(E));
    return F.Found;
  }

  // Rewrites E's text: batch values become their gathered names, derived variables their
  // derivation from gathered tensors, counts of samples the gathered count.
  std::string rewrite(const Expr *E) {
    std::map<unsigned, std::pair<unsigned, std::string>> Replacements; // offset -> (end, text)
    collect(E, Replacements);
    const SourceManager &SM = Context.sourceManager();
    const CharSourceRange Range = Lexer::makeFileCharRange(
        CharSourceRange::getTokenRange(E->getSourceRange()), SM, Context.ast().getLangOpts());
    const unsigned Begin = SM.getFileOffset(Range.getBegin()),
                   End = SM.getFileOffset(Range.getEnd());
    const std::string Text = Context.source().text(Range);
    std::string Out;
    unsigned Pos = Begin;
    for (const auto &[Offset, Replacement] : Replacements) {
      if (Offset < Pos || Replacement.first > End)
        continue;
      Out += Text.substr(Pos - Begin, Offset - Pos) + Replacement.second;
      Pos = Replacement.first;
    }
    return Out + Text.substr(Pos - Begin);
  }

  // First pass over an accumulated value: the batch values it needs gathered.
  void need(const Expr *E, bool CountsOnly) {
    struct Walker : RecursiveASTVisitor<Walker> {
      EvaluationLoop *Self;
      bool CountsOnly;
      bool TraverseCXXMemberCallExpr(CXXMemberCallExpr *Call) {
        if (const Expr *Counted = countedTensor(Call)) {
          if (CountsOnly)
            Self->needCount(Counted);
          return true;
        }
        return RecursiveASTVisitor::TraverseCXXMemberCallExpr(Call);
      }
      bool TraverseMemberExpr(MemberExpr *ME) {
        if (!CountsOnly && Self->isBatchValue(ME)) {
          Self->needValue(ME);
          return true;
        }
        return RecursiveASTVisitor::TraverseMemberExpr(ME);
      }
      bool VisitDeclRefExpr(DeclRefExpr *Ref) {
        if (!CountsOnly && Self->isBatchValue(Ref))
          Self->needValue(Ref);
        return true;
      }
      bool TraverseLambdaExpr(LambdaExpr *) { return true; }
    } W;
    W.Self = this;
    W.CountsOnly = CountsOnly;
    W.TraverseStmt(const_cast<Expr *>(E));
  }

  void needValue(const Expr *E) {
    if (const Expr *Derived = derivation(varOf(E))) {
      if (std::find(DerivedVars.begin(), DerivedVars.end(), varOf(E)) == DerivedVars.end())
        DerivedVars.push_back(varOf(E));
      need(Derived, false);
      return;
    }
    addSource(E);
  }
  void needCount(const Expr *Counted) {
    if (!isBatchValue(Counted))
      return;
    if (const Expr *Derived = derivation(varOf(Counted))) {
      need(Derived, true);
      return;
    }
    // Any gathered batch value counts the samples; gather this one only if nothing else is.
    CountFallbacks.push_back(Counted);
  }
  void resolveCounts() {
    if (Sources.empty() && !CountFallbacks.empty())
      addSource(CountFallbacks.front());
  }

  void addSource(const Expr *E) {
    const std::string Text = Context.source().text(bare(E)->getSourceRange());
    for (const Source &S : Sources)
      if (S.Text == Text)
        return;
    std::string Name = Text;
    if (const auto *Member = dyn_cast<MemberExpr>(bare(E)))
      Name = Member->getMemberDecl()->getNameAsString();
    const VarDecl *Declared = varOf(E);
    Sources.push_back({Text, "all_" + Name, Declared ? Declared : decompositionOf(E)});
  }

  struct Source {
    std::string Text;     // as written: output, batch.target
    std::string Gathered; // all_output, all_target
    const VarDecl *Var;   // its declaration (a binding's decomposition); null for a member of
                          // the loop variable
  };
  std::vector<Source> Sources;
  /// Locals computed from batch values (`auto pred = output.argmax(1)`), in order met.
  std::vector<const VarDecl *> DerivedVars;
  /// Those taken from the gathered values where they are declared (`auto pred =
  /// all_output.argmax(1)`): the metrics that read them are left as written.
  std::set<const VarDecl *> InPlace;

private:
  bool declaredInLoop(const VarDecl *Var) const {
    const SourceManager &SM = Context.sourceManager();
    const SourceRange R = Loop->getSourceRange();
    return !SM.isBeforeInTranslationUnit(Var->getLocation(), R.getBegin()) &&
           !SM.isBeforeInTranslationUnit(R.getEnd(), Var->getLocation());
  }
  // Already the result of a gather (a previous migration).
  static bool isGathered(const VarDecl *Var) {
    if (!Var->getInit())
      return false;
    if (const auto *Call = dyn_cast<CallExpr>(bare(Var->getInit())))
      return gathersTensors(Call);
    return false;
  }

  const std::string *gatheredName(const Expr *E) const {
    const std::string Text = Context.source().text(bare(E)->getSourceRange());
    for (const Source &S : Sources)
      if (S.Text == Text)
        return &S.Gathered;
    return nullptr;
  }

  void replaceAt(std::map<unsigned, std::pair<unsigned, std::string>> &Out, const Expr *E,
                 std::string Text) const {
    const SourceManager &SM = Context.sourceManager();
    const CharSourceRange Range = Lexer::makeFileCharRange(
        CharSourceRange::getTokenRange(E->getSourceRange()), SM, Context.ast().getLangOpts());
    if (Range.isInvalid())
      return;
    Out[SM.getFileOffset(Range.getBegin())] = {SM.getFileOffset(Range.getEnd()), std::move(Text)};
  }

  void collect(const Expr *E, std::map<unsigned, std::pair<unsigned, std::string>> &Out) {
    struct Walker : RecursiveASTVisitor<Walker> {
      EvaluationLoop *Self;
      std::map<unsigned, std::pair<unsigned, std::string>> *Out;
      bool TraverseCXXMemberCallExpr(CXXMemberCallExpr *Call) {
        if (const Expr *Counted = countedTensor(Call); Counted && Self->isBatchValue(Counted)) {
          // Every gathered tensor of the batch has its samples: a count of a derived one
          // (`fine_target = stack(targets).to(torch::kInt64)`, DominionSoftware's) is the first
          // gathered tensor's count too, not its derivation written out again from this
          // process's own batch.
          const std::string *Name = Self->gatheredName(Counted);
          if (!Name && !Self->Sources.empty())
            Name = &Self->Sources.front().Gathered;
          if (Name) {
            Self->replaceAt(*Out, Call, *Name + ".size(0)");
            return true;
          }
        }
        return RecursiveASTVisitor::TraverseCXXMemberCallExpr(Call);
      }
      bool TraverseMemberExpr(MemberExpr *ME) {
        if (Self->isBatchValue(ME)) {
          if (const std::string *Name = Self->gatheredName(ME))
            Self->replaceAt(*Out, ME, *Name);
          return true;
        }
        return RecursiveASTVisitor::TraverseMemberExpr(ME);
      }
      bool VisitDeclRefExpr(DeclRefExpr *Ref) {
        if (!Self->isBatchValue(Ref) || Self->InPlace.count(Self->varOf(Ref)))
          return true;
        if (const Expr *Derived = Self->derivation(Self->varOf(Ref))) {
          std::string Text = Self->rewrite(Derived);
          if (!isa<CallExpr>(bare(Derived)) && !isa<DeclRefExpr>(bare(Derived)) &&
              !isa<MemberExpr>(bare(Derived)))
            Text = "(" + Text + ")";
          Self->replaceAt(*Out, Ref, Text);
        } else if (const std::string *Name = Self->gatheredName(Ref)) {
          Self->replaceAt(*Out, Ref, *Name);
        }
        return true;
      }
      bool TraverseLambdaExpr(LambdaExpr *) { return true; }
    } W;
    W.Self = this;
    W.Out = &Out;
    W.TraverseStmt(const_cast<Expr *>(E));
  }

  MigrationContext &Context;
  const CXXForRangeStmt *Loop;
  std::vector<const Expr *> CountFallbacks;
};

bool containsGather(const Stmt *S) {
  struct Finder : RecursiveASTVisitor<Finder> {
    bool Found = false;
    bool VisitCallExpr(CallExpr *Call) {
      Found = Found || gathersTensors(Call);
      return !Found;
    }
  } F;
  F.TraverseStmt(const_cast<Stmt *>(S));
  return F.Found;
}

// How many times Within reads Var.
unsigned countReferences(const VarDecl *Var, const Stmt *Within) {
  struct Counter : RecursiveASTVisitor<Counter> {
    const VarDecl *Var;
    unsigned Count = 0;
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      Count += Ref->getDecl() == Var;
      return true;
    }
  } C;
  C.Var = Var;
  C.TraverseStmt(const_cast<Stmt *>(Within));
  return C.Count;
}

// A local computed from batch values and read only by the metrics (and by other such locals)
// is taken from the gathered values where it is declared: one changed line, and the metrics
// keep reading it. A local read elsewhere too keeps its batch's value; the metrics then read its
// computation from the gathered values instead. Returns the declarations of those taken so.
std::vector<const Stmt *> takeLocalsFromGathered(MigrationContext &Context, llvm::StringRef Check,
                                                 EvaluationLoop &Eval, const CompoundStmt *Body,
                                                 const std::vector<const Expr *> &Metrics) {
  const SourceManager &SM = Context.sourceManager();
  const Stmt *FirstMetric = Metrics.front();
  std::vector<const Stmt *> Declarations;
  for (const VarDecl *Var : Eval.DerivedVars) {
    const Stmt *Declaration = nullptr;
    for (const Stmt *Top : Body->body())
      if (const auto *DS = dyn_cast<DeclStmt>(Top);
          DS && DS->isSingleDecl() && DS->getSingleDecl() == Var)
        Declaration = Top;
    if (!Declaration || !Context.canEdit(Check, Var->getInit()->getSourceRange()))
      continue;
    unsigned InMetrics = 0;
    for (const Expr *Value : Metrics)
      InMetrics += countReferences(Var, Value);
    for (const VarDecl *Other : Eval.DerivedVars)
      if (Other != Var)
        InMetrics += countReferences(Var, Other->getInit());
    if (InMetrics == 0 || InMetrics != countReferences(Var, Body))
      continue;
    // Declared before the first metric: the gather moves up to it, which needs every gathered
    // value declared by then.
    if (SM.isBeforeInTranslationUnit(Declaration->getBeginLoc(), FirstMetric->getBeginLoc()) &&
        llvm::any_of(Eval.Sources, [&](const EvaluationLoop::Source &S) {
          return S.Var &&
                 !SM.isBeforeInTranslationUnit(S.Var->getLocation(), Declaration->getBeginLoc());
        }))
      continue;
    Eval.InPlace.insert(Var);
    Declarations.push_back(Declaration);
  }
  return Declarations;
}

// Calls in an evaluation loop's body that hand a batch's values to an object that outlives the
// loop (`bleu.update(predictions, batch.target.references)`, `outputs.push_back(output)`): on
// several processes that object sees this process's share of the data only.
std::vector<const CXXMemberCallExpr *> perProcessCollections(const CXXForRangeStmt *Loop) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const CXXForRangeStmt *Loop;
    std::vector<const CXXMemberCallExpr *> Found;
    bool inBody(const Decl *D) const {
      const SourceRange Body = Loop->getSourceRange();
      return !(D->getLocation() < Body.getBegin()) && !(Body.getEnd() < D->getLocation());
    }
    // Reads the loop variable or a variable declared in the loop.
    bool readsBatch(const Expr *E) const {
      struct Reads : RecursiveASTVisitor<Reads> {
        const Finder *Self;
        bool Found = false;
        bool VisitDeclRefExpr(DeclRefExpr *Ref) {
          const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
          if (const auto *Binding = dyn_cast<BindingDecl>(Ref->getDecl()))
            Var = dyn_cast_or_null<VarDecl>(Binding->getDecomposedDecl());
          // Values gathered already (`auto all = accelerator.gather_for_metrics(output)`) are
          // every process's.
          Found = Found ||
                  (Var && Self->inBody(Var) && !(Var->getInit() && containsGather(Var->getInit())));
          return !Found;
        }
      } R;
      R.Self = this;
      R.TraverseStmt(const_cast<Expr *>(E));
      return R.Found;
    }
    bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
      const CXXMethodDecl *Method = Call->getMethodDecl();
      const auto *Ref =
          dyn_cast<DeclRefExpr>(Call->getImplicitObjectArgument()->IgnoreParenImpCasts());
      const auto *Object = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
      if (!Method || Method->isConst() || !Object || inBody(Object) || Call->getNumArgs() == 0)
        return true;
      const QualType T = Object->getType().getNonReferenceType();
      if (isTensor(T) || isModule(T) || isOptimizerOrPointer(T) || isAccelerator(T) ||
          isDataLoader(T) || isClassOrDerived(T, "std::basic_ostream") || isStdSmartPointer(T) ||
          T->isPointerType())
        return true;
      if (llvm::any_of(Call->arguments(),
                       [&](const Expr *Arg) { return !containsGather(Arg) && readsBatch(Arg); }))
        Found.push_back(Call);
      return true;
    }
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  } F;
  F.Loop = Loop;
  F.TraverseStmt(const_cast<Stmt *>(Loop->getBody()));
  return F.Found;
}

/// An accumulation of an evaluation loop: `Statement` adds `Value`; `TopLevel` is the statement
/// of the loop's body that holds it.
struct Accumulation {
  const Stmt *Statement;
  const Expr *Value;
  const Stmt *TopLevel;
};

/// The per-sample accumulations of the evaluation loop `Loop` (body `Body`) that the check may
/// edit. A number per batch (a loss's item(), a sum over tokens) is reduce-metrics' to sum after
/// the loop.
std::vector<Accumulation> accumulationsIn(MigrationContext &Context, llvm::StringRef Name,
                                          const CXXForRangeStmt *Loop, const CompoundStmt *Body) {
  std::vector<Accumulation> Accumulations;
  for (const Stmt *Top : Body->body()) {
    struct Finder : RecursiveASTVisitor<Finder> {
      std::vector<std::pair<const Stmt *, const Expr *>> Found;
      bool VisitStmt(Stmt *S) {
        if (const Expr *Value = addedValue(S))
          Found.emplace_back(S, Value);
        return true;
      }
      bool TraverseLambdaExpr(LambdaExpr *) { return true; }
      bool TraverseCXXForRangeStmt(CXXForRangeStmt *) { return true; } // an inner loop: its own
    } F;
    F.TraverseStmt(const_cast<Stmt *>(Top));
    for (const auto &[S, Value] : F.Found)
      if (!containsGather(Value) && !takesItemOfBatchResult(Loop, Value) &&
          !readsTokensNotSamples(Loop, Value) && Context.canEdit(Name, S->getSourceRange()))
        Accumulations.push_back({S, Value, Top});
  }
  return Accumulations;
}

/// The statement the gather goes before: the first accumulation, once every gathered variable is
/// declared; or the first local taken from the gathered values, when that comes earlier. Null,
/// reported, when a gathered value is computed after the first metric that needs it.
const Stmt *gatherPoint(MigrationContext &Context, llvm::StringRef Name,
                        const CXXForRangeStmt *Loop, const CompoundStmt *Body, EvaluationLoop &Eval,
                        const std::vector<Accumulation> &Accumulations) {
  const SourceManager &SM = Context.sourceManager();
  const Stmt *Before = Accumulations.front().TopLevel;
  std::vector<const Expr *> Metrics;
  for (const Accumulation &A : Accumulations)
    Metrics.push_back(A.Value);
  for (const Stmt *Declaration : takeLocalsFromGathered(Context, Name, Eval, Body, Metrics))
    if (SM.isBeforeInTranslationUnit(Declaration->getBeginLoc(), Before->getBeginLoc()))
      Before = Declaration;
  for (const auto &S : Eval.Sources)
    if (S.Var && S.Var != Loop->getLoopVariable() &&
        SM.isBeforeInTranslationUnit(Before->getBeginLoc(), S.Var->getLocation())) {
      Context.warn(Name, Accumulations.front().Statement->getBeginLoc(),
                   "'" + S.Text +
                       "' is computed after the first metric that needs it; gather the "
                       "batch's outputs and targets with accelerator.gather_for_metrics by hand");
      return nullptr;
    }
  return Before;
}

} // namespace

void GatherForMetricsCheck::warnPerProcessCollections(const CXXForRangeStmt *Loop) {
  for (const CXXMemberCallExpr *Call : perProcessCollections(Loop)) {
    const std::string Callee =
        Context.source().text(SourceRange(Call->getBeginLoc(), Call->getExprLoc()));
    warn(Call->getBeginLoc(),
         "'" + Callee +
             "' takes each batch's values in an evaluation loop over a prepared "
             "loader; on several processes it sees this process's share of the data only: gather "
             "them first (accelerator.gather_for_metrics for tensors, gather_object for other "
             "values)");
  }
}

std::optional<SourceLocation> GatherForMetricsCheck::lineAbove(SourceLocation Loc) {
  // The start of Loc's line when only indentation precedes it, moved up past the comment lines
  // right above (they describe the statement and stay with it).
  const SourceManager &SM = Context.sourceManager();
  const auto [FID, Offset] = SM.getDecomposedLoc(SM.getFileLoc(Loc));
  const llvm::StringRef Buffer = SM.getBufferData(FID);
  auto lineStart = [&](size_t Pos) { return SourceText::lineStart(Buffer, Pos); };
  size_t Start = lineStart(Offset);
  if (!Buffer.substr(Start, Offset - Start).trim().empty())
    return std::nullopt;
  while (Start > 0) {
    const size_t Previous = lineStart(Start - 1);
    if (!Buffer.substr(Previous, Start - Previous).trim().startswith("//"))
      break;
    Start = Previous;
  }
  return SM.getLocForStartOfFile(FID).getLocWithOffset(static_cast<int>(Start));
}

void GatherForMetricsCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(cxxForRangeStmt(hasBody(compoundStmt())).bind("loop"), this);
}

void GatherForMetricsCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Loop = Result.Nodes.getNodeAs<CXXForRangeStmt>("loop");
  // Evaluation loops only: over a prepared loader, no backward.
  if (!iteratesPreparedLoader(Context, Loop) || containsTrainingStep(Loop->getBody()))
    return;
  warnPerProcessCollections(Loop);
  const auto *Body = cast<CompoundStmt>(Loop->getBody());

  const std::vector<Accumulation> Accumulations = accumulationsIn(Context, Name, Loop, Body);
  if (Accumulations.empty())
    return;

  EvaluationLoop Eval(Context, Loop);
  for (const Accumulation &A : Accumulations)
    Eval.need(A.Value, false);
  for (const Accumulation &A : Accumulations)
    Eval.need(A.Value, true);
  Eval.resolveCounts();
  if (Eval.Sources.empty())
    return;
  const Stmt *Before = gatherPoint(Context, Name, Loop, Body, Eval, Accumulations);
  if (!Before)
    return;

  const std::string Acc = accelerator(Before);
  if (Acc.empty())
    return;
  std::string Names, Values;
  for (const auto &S : Eval.Sources) {
    Names += (Names.empty() ? "" : ", ") + S.Gathered;
    Values += (Values.empty() ? "" : ", ") + S.Text;
  }
  const std::string Declaration =
      Eval.Sources.size() == 1
          ? "auto " + Names + " = " + Acc + ".gather_for_metrics(" + Values + ");"
          : "auto [" + Names + "] = " + Acc + ".gather_for_metrics(" + Values + ");";
  const std::string Indent = Context.source().indentation(Before->getBeginLoc());
  if (const auto LineStart = lineAbove(Before->getBeginLoc()))
    Context.insert(Name, *LineStart, Indent + Declaration + "\n");
  else
    Context.insert(Name, Before->getBeginLoc(), Declaration + " ");
  for (const VarDecl *Var : Eval.InPlace) {
    const std::string Rewritten = Eval.rewrite(Var->getInit());
    if (Rewritten != Context.source().text(Var->getInit()->getSourceRange()))
      Context.replace(Name, Var->getInit()->getSourceRange(), Rewritten);
  }
  for (const Accumulation &A : Accumulations) {
    const std::string Rewritten = Eval.rewrite(A.Value);
    if (Rewritten != Context.source().text(A.Value->getSourceRange()))
      Context.replace(Name, A.Value->getSourceRange(), Rewritten);
  }
  Context.applied(Name, Before->getBeginLoc());
}

} // namespace accel::migrate
