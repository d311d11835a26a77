//===- PrepareCheck.cpp ---------------------------------------------------------------------===//
#include "PrepareCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/AST/RecursiveASTVisitor.h"

using namespace clang;

namespace accel::migrate {

namespace {

const DeclStmt *declStmtOf(MigrationContext &Context, const VarDecl *Var) {
  for (const DynTypedNode &Parent : Context.ast().getParents(*Var))
    if (const auto *DS = Parent.get<DeclStmt>())
      return DS;
  return nullptr;
}

// `model->to(...)`, `model.to(...)` or `torch::load(model, ...)`: set-up the model gets before
// training, after which it is prepared.
bool isModelSetUp(const Stmt *S, const VarDecl *Model) {
  const auto *E = dyn_cast<Expr>(S);
  if (!E)
    return false;
  E = E->IgnoreImplicit();
  if (const auto *Member = dyn_cast<CXXMemberCallExpr>(E))
    return Member->getMethodDecl() && plainName(Member->getMethodDecl()) == "to" &&
           rootDecl(Member->getImplicitObjectArgument()) == Model;
  if (const auto *Call = dyn_cast<CallExpr>(E))
    if (const FunctionDecl *Callee = Call->getDirectCallee();
        Callee && Callee->getQualifiedNameAsString() == "torch::load" && Call->getNumArgs() >= 1)
      return rootDecl(Call->getArg(0)) == Model;
  return false;
}

// The innermost loop around S in its function, or null.
const Stmt *innermostLoop(MigrationContext &Context, const Stmt *S) {
  for (const Stmt *P = Context.reach().parentStmt(S); P; P = Context.reach().parentStmt(P))
    if (isa<ForStmt>(P) || isa<CXXForRangeStmt>(P) || isa<WhileStmt>(P) || isa<DoStmt>(P))
      return P;
  return nullptr;
}

// backward() in Body itself, not in a loop nested in it: Body is one training step.
bool backwardOutsideNestedLoops(const Stmt *Body) {
  struct Finder : RecursiveASTVisitor<Finder> {
    bool Found = false;
    bool TraverseForStmt(ForStmt *) { return true; }
    bool TraverseCXXForRangeStmt(CXXForRangeStmt *) { return true; }
    bool TraverseWhileStmt(WhileStmt *) { return true; }
    bool TraverseDoStmt(DoStmt *) { return true; }
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
    bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
      Found = Found || (Call->getMethodDecl() && plainName(Call->getMethodDecl()) == "backward");
      return !Found;
    }
  } F;
  F.TraverseStmt(const_cast<Stmt *>(Body));
  return F.Found;
}

// A scheduler stepped once an epoch: each of its step() calls (there is one at least) is outside
// the batch loop: the innermost loop around it neither iterates a prepared loader nor runs
// backward() in its own body. A step in the batch loop follows Accelerate's rule instead.
bool steppedPerEpoch(MigrationContext &Context, const VarDecl *Scheduler) {
  struct Steps : RecursiveASTVisitor<Steps> {
    const VarDecl *Scheduler;
    std::vector<const CXXMemberCallExpr *> Calls;
    bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
      if (Call->getMethodDecl() && plainName(Call->getMethodDecl()) == "step" &&
          rootDecl(Call->getImplicitObjectArgument()) == Scheduler)
        Calls.push_back(Call);
      return true;
    }
  } S;
  S.Scheduler = Scheduler;
  const auto *Fn = dyn_cast_or_null<FunctionDecl>(Scheduler->getParentFunctionOrMethod());
  if (!Fn || !Fn->getBody())
    return false;
  S.TraverseStmt(Fn->getBody());
  if (S.Calls.empty())
    return false;
  return llvm::all_of(S.Calls, [&](const CXXMemberCallExpr *Call) {
    const Stmt *Loop = innermostLoop(Context, Call);
    if (!Loop)
      return true;
    if (const auto *RangeFor = dyn_cast<CXXForRangeStmt>(Loop);
        RangeFor && iteratesPreparedLoader(Context, RangeFor))
      return false;
    return !backwardOutsideNestedLoops(loopBody(Loop));
  });
}

} // namespace

void PrepareCheck::registerMatchers(ast_matchers::MatchFinder &Finder) {
  using namespace ast_matchers;
  Finder.addMatcher(typeLoc(loc(decltypeType())).bind("decltype"), this);
}

void PrepareCheck::check(const ast_matchers::MatchFinder::MatchResult &Result) {
  const auto Loc = Result.Nodes.getNodeAs<TypeLoc>("decltype")->getAs<DecltypeTypeLoc>();
  if (Loc && Context.isEditable(Loc.getBeginLoc()) &&
      !llvm::any_of(Decltypes, [&](const DecltypeTypeLoc &Seen) {
        return Seen.getBeginLoc() == Loc.getBeginLoc(); // a template's instantiations repeat it
      }))
    Decltypes.push_back(Loc);
}

void PrepareCheck::keepDeclaredType(const VarDecl *Var, const std::string &Type) {
  for (const DecltypeTypeLoc &Loc : Decltypes) {
    const auto *Ref =
        dyn_cast<DeclRefExpr>(Loc.getTypePtr()->getUnderlyingExpr()->IgnoreParenImpCasts());
    const SourceRange Written(Loc.getBeginLoc(), Loc.getRParenLoc());
    if (Ref && Ref->getDecl() == Var && Context.canEdit(Name, Written))
      Context.replace(Name, Written, Type);
  }
}

void PrepareCheck::finish() {
  ProgramFacts &Facts = Context.facts();
  for (const VarDecl *Model : Facts.models())
    if (!Facts.alreadyPrepared(Model))
      prepareModel(Model);
  for (const ProgramFacts::TrainedParameter &Parameter : Facts.parametersToPrepare())
    if (!Facts.alreadyPrepared(Parameter.Model))
      prepareParameter(Parameter);
  for (const VarDecl *Optimizer : Facts.optimizers())
    if (!Facts.alreadyPrepared(Optimizer))
      prepareByValue(Optimizer);
  // A scheduler stepped once an epoch keeps its epochs on every process count (Accelerate's
  // rule, N steps per call on N processes, is for one stepped every batch).
  for (const VarDecl *Scheduler : Facts.schedulers())
    if (!Facts.alreadyPrepared(Scheduler))
      prepareByValue(Scheduler, steppedPerEpoch(Context, Scheduler)
                                    ? ", accel::SchedulerStepping::per_epoch"
                                    : "");
  for (const VarDecl *Loader : Facts.loadersFeedingNoModel())
    warn(Loader->getLocation(),
         llvm::Twine("data loader '") + Loader->getName() +
             "' feeds no model (its loops call no model and no backward): left as written, so "
             "that every process reads all of it; if its batches are a share of the work, "
             "prepare it by hand (accelerator.prepare_data_loader)");
  for (const VarDecl *Loader : Facts.loaders())
    prepareLoader(Loader);
  for (const CallExpr *Make : Facts.returnedLoaders())
    if (prepareMakeCall(Make))
      Context.applied(Name, Make->getBeginLoc());
  for (const FieldDecl *Model : Facts.memberModels())
    if (!Facts.alreadyPrepared(Model))
      prepareMemberModel(Model);
  for (const FieldDecl *Optimizer : Facts.memberOptimizers())
    if (!Facts.alreadyPrepared(Optimizer))
      prepareMemberOptimizer(Optimizer);
  for (const VarDecl *Optimizer : Facts.unpairedOptimizers())
    warn(Optimizer->getLocation(),
         llvm::Twine("the parameters of optimizer '") + Optimizer->getName() +
             "' do not come from a model variable declared here; prepare that model by hand "
             "where it is created (accelerator.prepare(model))");
}

void PrepareCheck::prepareModel(const VarDecl *Model) {
  const DeclStmt *Declaration = declStmtOf(Context, Model);
  if (!Declaration || !Context.canEdit(Name, Declaration->getSourceRange()))
    return;
  // After the model's own set-up statements that directly follow it (placement, weight loading),
  // so that what gets prepared (and broadcast from rank 0) is the loaded model; never after a
  // statement that uses it otherwise (a call that trains it, an optimizer built from it, a
  // loop): a load after training (the best weights read back) must not move the prepare past
  // the training.
  const Stmt *After = Declaration;
  if (const auto *Block = dyn_cast_or_null<CompoundStmt>(Context.reach().parentStmt(Declaration))) {
    bool Seen = false;
    for (const Stmt *Child : Block->body()) {
      if (Child == Declaration) {
        Seen = true;
        continue;
      }
      if (!Seen)
        continue;
      if (isa<ForStmt>(Child) || isa<CXXForRangeStmt>(Child) || isa<WhileStmt>(Child) ||
          isa<DoStmt>(Child))
        break;
      if (isModelSetUp(Child, Model) && Context.isEditable(Child->getBeginLoc()))
        After = Child;
      else if (mentions(Child, Model))
        break;
    }
  }
  const std::string Acc = accelerator(Declaration);
  if (Acc.empty())
    return;
  Context.insertLineAfter(Name, After, Context.source().indentation(Declaration->getBeginLoc()),
                          Acc + ".prepare(" + Model->getNameAsString() + ");");
  Context.applied(Name, Model->getLocation());
}

void PrepareCheck::prepareParameter(const ProgramFacts::TrainedParameter &Parameter) {
  // No caller in sight: the function prepares the model it is given, before building its
  // optimizer (prepare() of a model already prepared does nothing, so a function called once an
  // epoch is right too).
  const auto *Fn = dyn_cast<FunctionDecl>(Parameter.Model->getDeclContext());
  const auto *Body = Fn ? dyn_cast_or_null<CompoundStmt>(Fn->getBody()) : nullptr;
  if (!Body || Body->body_empty())
    return;
  const Stmt *Before = Body->body_front();
  if (Parameter.Optimizer)
    if (const DeclStmt *Declaration = declStmtOf(Context, Parameter.Optimizer);
        Declaration && Context.reach().parentStmt(Declaration) == Body)
      Before = Declaration;
  if (!Context.canEdit(Name, Before->getSourceRange()))
    return;
  const std::string Acc = accelerator(Before);
  if (Acc.empty())
    return;
  Context.insertLineBefore(Name, Before->getBeginLoc(),
                           Acc + ".prepare(" + Parameter.Model->getNameAsString() + ");");
  Context.applied(Name, Parameter.Model->getLocation());
}

void PrepareCheck::prepareByValue(const VarDecl *Var, const std::string &MoreArgs) {
  const DeclStmt *Declaration = declStmtOf(Context, Var);
  const Expr *Init = Var->getInit();
  if (!Declaration || !Init || !Context.canEdit(Name, Declaration->getSourceRange()))
    return;
  if (!Declaration->isSingleDecl() || Var->isStaticLocal() || Var->getType().isConstQualified()) {
    warn(Var->getLocation(), llvm::Twine("'") + Var->getName() +
                                 "' is declared in a form accel-migrate does not rewrite; write "
                                 "auto " +
                                 Var->getName() + " = accelerator.prepare(...)");
    return;
  }
  const std::string Acc = accelerator(Declaration);
  if (Acc.empty())
    return;
  if (isOptimizerPointer(Var->getType())) {
    // torch::optim::Adam* optimizer = new torch::optim::Adam(...);
    //   ->  torch::optim::Adam* optimizer = acc.prepare(new torch::optim::Adam(...));
    // The prepared optimizer takes the given one's place; the type and the delete stay.
    prepareExpression(Init, Acc);
    Context.applied(Name, Var->getLocation());
    return;
  }
  const SourceRange TypeRange = Var->getTypeSourceInfo()->getTypeLoc().getSourceRange();
  const bool IsAuto = Var->getType()->getContainedAutoType() != nullptr;
  keepDeclaredType(Var, IsAuto ? Var->getType().getAsString(Context.ast().getPrintingPolicy())
                               : Context.source().text(TypeRange));
  const auto *Construct = dyn_cast<CXXConstructExpr>(Init->IgnoreImplicit());
  if (Var->getInitStyle() != VarDecl::CInit && Construct &&
      Construct->getParenOrBraceRange().isValid()) {
    // torch::optim::SGD optimizer(args);
    //   ->  auto optimizer = acc.prepare(torch::optim::SGD(args));
    const SourceRange Parens = Construct->getParenOrBraceRange();
    const std::string Args = Context.source().text(
        CharSourceRange::getCharRange(Parens.getBegin().getLocWithOffset(1), Parens.getEnd()));
    const bool Braces = Var->getInitStyle() == VarDecl::ListInit;
    const std::string Prepared = "auto " + Var->getNameAsString() + " = " + Acc + ".prepare(" +
                                 Context.source().text(TypeRange) + (Braces ? "{" : "(") + Args +
                                 (Braces ? "}" : ")") + MoreArgs + ")";
    const auto Whole = CharSourceRange::getTokenRange(TypeRange.getBegin(), Parens.getEnd());
    // Arguments over several lines are re-aligned inside the longer expression.
    if (Args.find('\n') != std::string::npos)
      Context.replaceFormatted(Name, Whole, Prepared);
    else
      Context.replace(Name, Whole, Prepared);
  } else {
    // auto optimizer = torch::optim::Adam(...);
    //   ->  auto optimizer = acc.prepare(torch::optim::Adam(...));
    // A named type becomes auto: the prepared object is a subclass and must not be sliced.
    if (!IsAuto)
      Context.replace(Name, TypeRange, "auto");
    Context.replace(Name, Init->getSourceRange(),
                    Acc + ".prepare(" + Context.source().text(Init->getSourceRange()) + MoreArgs +
                        ")");
  }
  Context.applied(Name, Var->getLocation());
}

namespace {

/// Whether E leaves a pointer or a smart pointer empty: `nullptr`, `NULL`, `0`, `{}`,
/// `{nullptr}`, `std::shared_ptr<T>()`.
bool isEmptyValue(ASTContext &Ctx, const Expr *E) {
  E = E->IgnoreParenImpCasts();
  if (const auto *List = dyn_cast<InitListExpr>(E))
    return List->getNumInits() == 0 ||
           (List->getNumInits() == 1 && isEmptyValue(Ctx, List->getInit(0)));
  if (isa<ImplicitValueInitExpr>(E) || isa<CXXNullPtrLiteralExpr>(E) || isa<GNUNullExpr>(E))
    return true;
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E)) {
    // A smart pointer built without arguments stays empty; a module (or its holder) is built.
    if (Construct->getNumArgs() == 0)
      return isStdSmartPointer(E->getType());
    return Construct->getNumArgs() == 1 && isEmptyValue(Ctx, Construct->getArg(0));
  }
  return !E->isValueDependent() &&
         E->isNullPointerConstant(Ctx, Expr::NPC_ValueDependentIsNotNull) != Expr::NPCK_NotNull;
}

} // namespace

bool PrepareCheck::setAfterConstruction(const FieldDecl *Model) {
  const auto &Assigned = Context.facts().assignmentStatementsOf(Model);
  if (Assigned.empty())
    return false;
  // Set in methods only: one set in a constructor's body is prepared at the constructor's end.
  for (const Stmt *S : Assigned) {
    const FunctionDecl *Fn = Context.reach().enclosingFunction(S);
    if (!Fn || isa<CXXConstructorDecl>(Fn))
      return false;
  }
  // Empty when the object is built: by its default member initializer, or (a pointer, a smart
  // pointer) by having none, and by every constructor's initializer list.
  ASTContext &Ctx = Context.ast();
  if (const Expr *InClass = Model->getInClassInitializer()) {
    if (!isEmptyValue(Ctx, InClass))
      return false;
  } else if (!Model->getType()->isPointerType() && !isStdSmartPointer(Model->getType())) {
    return false; // a module or holder member is built with its object
  }
  const auto *Class = cast<CXXRecordDecl>(Model->getParent());
  for (const CXXConstructorDecl *Ctor : Class->ctors())
    for (const CXXCtorInitializer *Init : Ctor->inits())
      if (Init->isWritten() && Init->getMember() == Model && !isEmptyValue(Ctx, Init->getInit()))
        return false;
  return true;
}

void PrepareCheck::prepareAfterAssignments(const FieldDecl *Model) {
  const std::string ModelName = Model->getNameAsString();
  bool Prepared = false;
  for (const Stmt *S : Context.facts().assignmentStatementsOf(Model)) {
    const Expr *Value = assignedValue(S);
    if (Value && isEmptyValue(Context.ast(), Value))
      continue; // `model = nullptr` after its delete
    const auto *Assignment = dyn_cast<Expr>(S);
    const Stmt *Full = Assignment ? asFullStatement(Context, Assignment) : nullptr;
    const FunctionDecl *Method = Context.reach().enclosingFunction(S);
    if (!Value || !Full || !Method || !Context.canEdit(Name, Full->getSourceRange())) {
      warn(S->getBeginLoc(), llvm::Twine("model '") + ModelName +
                                 "' is set here inside a larger expression; prepare it by hand "
                                 "right after (accelerator.prepare(" +
                                 ModelName + "))");
      continue;
    }
    const std::string Acc = Context.reach().requireAccelerator(Method);
    Context.insertLineAfter(Name, Full, Context.source().indentation(Full->getBeginLoc()),
                            Acc + ".prepare(" + ModelName + ");");
    Prepared = true;
  }
  if (Prepared)
    Context.applied(Name, Model->getLocation());
}

void PrepareCheck::prepareMemberModel(const FieldDecl *Model) {
  if (setAfterConstruction(Model)) {
    prepareAfterAssignments(Model);
    return;
  }
  // At the end of each constructor that builds the object (after whatever set-up it gives the
  // model there), the constructor's own accelerator parameter preparing it.
  const auto *Class = cast<CXXRecordDecl>(Model->getParent());
  bool Prepared = false, Defaulted = false;
  for (const CXXConstructorDecl *Ctor : Class->ctors()) {
    const FunctionDecl *Definition = nullptr;
    if (!isWrittenConstructor(Ctor) || !Ctor->hasBody(Definition))
      continue;
    // `T() = default;` has no body to write in (create-accelerator gives it an empty one).
    if (Definition->isExplicitlyDefaulted()) {
      Defaulted = true;
      continue;
    }
    const auto *Body = dyn_cast_or_null<CompoundStmt>(Definition->getBody());
    if (!Body || cast<CXXConstructorDecl>(Definition)->isDelegatingConstructor() ||
        !Context.canEdit(Name, Body->getSourceRange()))
      continue;
    // An empty body gets the one statement, calling the process's Accelerator itself: a binding
    // on a line of its own would be the body's only other line.
    const std::string Acc =
        Body->body_empty()
            ? Context.reach().acceleratorInInitializer(cast<CXXConstructorDecl>(Definition))
            : Context.reach().requireAccelerator(Definition);
    const std::string Statement = Acc + ".prepare(" + Model->getNameAsString() + ");";
    if (!Body->body_empty()) {
      Context.insertLineAfter(Name, Body->body_back(),
                              Context.source().indentation(Body->body_back()->getBeginLoc()),
                              Statement);
    } else {
      const std::string Indent = Context.source().indentation(Definition->getBeginLoc());
      Context.replace(Name, Body->getSourceRange(),
                      "{\n" + Indent + Context.source().indentStep(Definition->getBeginLoc()) +
                          Statement + "\n" + Indent + "}");
    }
    Prepared = true;
  }
  if (Prepared)
    Context.applied(Name, Model->getLocation());
  else if (!Class->hasUserDeclaredConstructor() || Defaulted)
    warn(Model->getLocation(), llvm::Twine("model '") + Model->getName() +
                                   "' is a member of a class without a written constructor; "
                                   "prepare it by hand (accelerator.prepare(" +
                                   Model->getName() + ")) once it is built");
}

void PrepareCheck::prepareExpression(const Expr *Value, const std::string &Acc) {
  Context.replace(Name, Value->getSourceRange(),
                  Acc + ".prepare(" + Context.source().text(Value->getSourceRange()) + ")");
}

namespace {

// Whether a pointer member's value makes a new optimizer (`new Adam(...)`,
// `std::make_unique<Adam>(...)`, a smart pointer built from either), not one made elsewhere that
// it points at as well (`current_ = adam_.get();`, `&sgd_`): that one is prepared where it is made.
bool makesOptimizer(const Expr *Value) {
  for (unsigned Guard = 0; Value && Guard < 8; ++Guard) {
    Value = stripTemporaries(Value)->IgnoreParenImpCasts();
    if (isa<CXXNewExpr>(Value))
      return true;
    if (const auto *Construct = dyn_cast<CXXConstructExpr>(Value)) {
      if (Construct->getNumArgs() == 0)
        return false;
      Value = Construct->getArg(0); // std::unique_ptr<Adam>(new Adam(...))
      continue;
    }
    if (const auto *Call = dyn_cast<CallExpr>(Value)) {
      const FunctionDecl *Callee = Call->getDirectCallee();
      const std::string Called = Callee ? Callee->getQualifiedNameAsString() : "";
      return Called == "std::make_unique" || Called == "std::make_shared";
    }
    return false;
  }
  return false;
}

} // namespace

void PrepareCheck::prepareMemberOptimizerPointer(const FieldDecl *Optimizer) {
  // Wherever the class sets it (its initializers, its methods' assignments), the new optimizer
  // is prepared: `optimizer = accelerator.prepare(new torch::optim::Adam(...))`. The member's
  // type stays `torch::optim::Adam*` (the prepared one is an Adam), and so does its `delete`.
  const auto *Class = cast<CXXRecordDecl>(Optimizer->getParent());
  bool Prepared = false, PointsElsewhere = false;
  for (const auto &[Ctor, Init] : Context.facts().initializersOf(Optimizer)) {
    if (!makesOptimizer(Init->getInit())) {
      PointsElsewhere = true;
      continue;
    }
    if (Context.canEdit(Name, Init->getSourceRange())) {
      prepareExpression(Init->getInit(), Context.reach().acceleratorInInitializer(Ctor));
      Prepared = true;
    }
  }
  // An empty default member initializer (`T *optimizer{};`, `= nullptr`) has nothing to prepare.
  if (const Expr *InClass = Optimizer->getInClassInitializer();
      InClass && !isEmptyValue(Context.ast(), InClass) && makesOptimizer(InClass) &&
      Context.canEdit(Name, InClass->getSourceRange())) {
    prepareExpression(InClass, Context.reach().acceleratorInClass(Class));
    Prepared = true;
  }
  for (const Expr *Value : Context.facts().assignmentsOf(Optimizer)) {
    const FunctionDecl *Method = Context.reach().enclosingFunction(Value);
    if (!Method || !Context.canEdit(Name, Value->getSourceRange()))
      continue;
    if (isa<CXXNullPtrLiteralExpr>(Value->IgnoreParenImpCasts()) ||
        isa<GNUNullExpr>(Value->IgnoreParenImpCasts()))
      continue; // `optimizer = nullptr` after its delete
    if (!makesOptimizer(Value)) {
      // DominionSoftware/LibTorchExamples' HybridOptimizer: `current_optimizer_ =
      // adam_optimizer_.get();`, and `= sgd_optimizer_.get();` when training stalls. Prepared
      // again there, the optimizer would be prepared twice, the second time on the processes
      // whose loss stalled alone.
      PointsElsewhere = true;
      continue;
    }
    prepareExpression(Value, Context.reach().requireAccelerator(Method));
    Prepared = true;
  }
  if (!Prepared && PointsElsewhere)
    return;
  if (!Prepared) {
    warn(Optimizer->getLocation(), llvm::Twine("optimizer '") + Optimizer->getName() +
                                       "' is not set where accel-migrate can see it; set it to "
                                       "accelerator.prepare(new ...)");
    return;
  }
  Context.applied(Name, Optimizer->getLocation());
}

void PrepareCheck::prepareMemberOptimizer(const FieldDecl *Optimizer) {
  if (isOptimizerPointer(Optimizer->getType())) {
    prepareMemberOptimizerPointer(Optimizer);
    return;
  }
  // `torch::optim::SGD optimizer_;` initialized as `optimizer_(args)` becomes
  // `accel::AcceleratedOptimizer<torch::optim::SGD> optimizer_;` initialized as
  // `optimizer_(accel::Accelerator::current().prepare(torch::optim::SGD(args)))`.
  const SourceRange TypeRange = Optimizer->getTypeSourceInfo()->getTypeLoc().getSourceRange();
  if (!Context.canEdit(Name, Optimizer->getSourceRange()))
    return;
  const auto *Class = cast<CXXRecordDecl>(Optimizer->getParent());
  const std::string Type = Context.source().text(TypeRange);
  auto Prepared = [&](const Expr *Init, const std::string &Acc) -> bool {
    const auto *Construct =
        dyn_cast_or_null<CXXConstructExpr>(Init ? Init->IgnoreImplicit() : nullptr);
    if (!Construct)
      return false;
    const SourceRange Parens = Construct->getParenOrBraceRange();
    if (Parens.isValid() && !isa<CXXTemporaryObjectExpr>(Construct)) {
      // optimizer_(args) or optimizer_{args}: the construct's own parentheses.
      const std::string Args = Context.source().text(
          CharSourceRange::getCharRange(Parens.getBegin().getLocWithOffset(1), Parens.getEnd()));
      const bool Braces =
          Context.source().text(SourceRange(Parens.getBegin(), Parens.getBegin())) == "{";
      const auto Inside =
          CharSourceRange::getCharRange(Parens.getBegin().getLocWithOffset(1), Parens.getEnd());
      const std::string Prepared =
          Acc + ".prepare(" + Type + (Braces ? "{" : "(") + Args + (Braces ? "})" : "))");
      // Arguments over several lines are re-aligned inside the longer expression.
      if (Args.find('\n') != std::string::npos)
        Context.replaceFormatted(Name, Inside, Prepared);
      else
        Context.replace(Name, Inside, Prepared);
      return true;
    }
    // = torch::optim::SGD(args), or the copy of one: prepare the whole expression.
    Context.replace(Name, Init->getSourceRange(),
                    Acc + ".prepare(" + Context.source().text(Init->getSourceRange()) + ")");
    return true;
  };
  bool Initialized = false;
  for (const auto &[Ctor, Init] : Context.facts().initializersOf(Optimizer))
    if (Context.canEdit(Name, Init->getSourceRange()))
      Initialized |= Prepared(Init->getInit(), Context.reach().acceleratorInInitializer(Ctor));
  if (const Expr *InClass = Optimizer->getInClassInitializer())
    Initialized |= Prepared(InClass, Context.reach().acceleratorInClass(Class));
  // A constructor defined in another file initializes it there: that file's migration prepares
  // it, this one changes the member's type all the same (the header's edit is one edit).
  const bool ElsewhereToo = llvm::any_of(Class->ctors(), [](const CXXConstructorDecl *Ctor) {
    return isWrittenConstructor(Ctor) && !Ctor->hasBody();
  });
  if (!Initialized && !ElsewhereToo) {
    warn(Optimizer->getLocation(), llvm::Twine("optimizer '") + Optimizer->getName() +
                                       "' is not initialized where accel-migrate can see it; "
                                       "initialize it with accelerator.prepare(...)");
    return;
  }
  Context.replace(Name, TypeRange, "accel::AcceleratedOptimizer<" + Type + ">");
  Context.applied(Name, Optimizer->getLocation());
}

void PrepareCheck::prepareLoader(const VarDecl *Loader) {
  const CallExpr *Make = findMakeDataLoaderCall(Loader->getInit());
  if (!Make || !Context.canEdit(Name, Make->getSourceRange()))
    return;
  // A written-out StatelessDataLoader is loader-type's to rename; any other type is the user's.
  if (!Loader->getType()->getContainedAutoType() &&
      !llvm::StringRef(Loader->getType().getAsString()).contains("StatelessDataLoader<")) {
    warn(Loader->getLocation(), llvm::Twine("data loader '") + Loader->getName() +
                                    "' has a written-out type; declare it 'auto' and prepare it "
                                    "with accelerator.prepare_data_loader(...)");
    return;
  }
  if (prepareMakeCall(Make))
    Context.applied(Name, Loader->getLocation());
}

bool PrepareCheck::prepareMakeCall(const CallExpr *Make) {
  const auto *Callee = dyn_cast<DeclRefExpr>(Make->getCallee()->IgnoreImplicit());
  if (!Callee || !Context.canEdit(Name, Make->getSourceRange()))
    return false;
  const std::string Acc = accelerator(Make);
  if (Acc.empty())
    return false;
  // make_data_loader<Sampler>(dataset, options)
  //   -> acc.prepare_data_loader<Sampler>(dataset, options)
  Context.replace(Name, SourceRange(Callee->getBeginLoc(), Callee->getNameInfo().getEndLoc()),
                  Acc + ".prepare_data_loader");
  return true;
}

} // namespace accel::migrate
