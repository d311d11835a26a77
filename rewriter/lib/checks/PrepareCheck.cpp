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

} // namespace

void PrepareCheck::onEndOfTranslationUnit() {
  ProgramFacts &Facts = Context.facts();
  for (const VarDecl *Model : Facts.models())
    if (!Facts.alreadyPrepared(Model))
      prepareModel(Model);
  for (const VarDecl *Optimizer : Facts.optimizers())
    if (!Facts.alreadyPrepared(Optimizer))
      prepareByValue(Optimizer);
  for (const VarDecl *Scheduler : Facts.schedulers())
    if (!Facts.alreadyPrepared(Scheduler))
      prepareByValue(Scheduler);
  for (const VarDecl *Loader : Facts.loaders())
    prepareLoader(Loader);
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
  // so that what gets prepared (and broadcast from rank 0) is the loaded model.
  const Stmt *After = Declaration;
  if (const auto *Block = dyn_cast_or_null<CompoundStmt>(Context.parentStmt(Declaration))) {
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
    }
  }
  const std::string Acc = accelerator(Declaration);
  if (Acc.empty())
    return;
  Context.insertLineAfter(Name, After, Context.indentation(Declaration->getBeginLoc()),
                          Acc + ".prepare(" + Model->getNameAsString() + ");");
  Context.applied(Name, Model->getLocation());
}

void PrepareCheck::prepareByValue(const VarDecl *Var) {
  const DeclStmt *Declaration = declStmtOf(Context, Var);
  const Expr *Init = Var->getInit();
  if (!Declaration || !Init || !Context.canEdit(Name, Declaration->getSourceRange()))
    return;
  if (!Declaration->isSingleDecl() || Var->isStaticLocal() || Var->getType().isConstQualified()) {
    warn(Var->getLocation(), llvm::Twine("'") + Var->getName() +
                                 "' is declared in a form accel-migrate does not rewrite; write "
                                 "auto " + Var->getName() + " = accelerator.prepare(...)");
    return;
  }
  const std::string Acc = accelerator(Declaration);
  if (Acc.empty())
    return;
  const SourceRange TypeRange = Var->getTypeSourceInfo()->getTypeLoc().getSourceRange();
  const bool IsAuto = Var->getType()->getContainedAutoType() != nullptr;
  const auto *Construct = dyn_cast<CXXConstructExpr>(Init->IgnoreImplicit());
  if (Var->getInitStyle() != VarDecl::CInit && Construct &&
      Construct->getParenOrBraceRange().isValid()) {
    // torch::optim::SGD optimizer(args);  ->  auto optimizer = acc.prepare(torch::optim::SGD(args));
    const SourceRange Parens = Construct->getParenOrBraceRange();
    const std::string Args = Context.text(CharSourceRange::getCharRange(
        Parens.getBegin().getLocWithOffset(1), Parens.getEnd()));
    const bool Braces = Var->getInitStyle() == VarDecl::ListInit;
    Context.replace(Name, SourceRange(TypeRange.getBegin(), Parens.getEnd()),
                    "auto " + Var->getNameAsString() + " = " + Acc + ".prepare(" +
                        Context.text(TypeRange) + (Braces ? "{" : "(") + Args +
                        (Braces ? "})" : "))"));
  } else {
    // auto optimizer = torch::optim::Adam(...);  ->  auto optimizer = acc.prepare(torch::optim::Adam(...));
    // A named type becomes auto: the prepared object is a subclass and must not be sliced.
    if (!IsAuto)
      Context.replace(Name, TypeRange, "auto");
    Context.replace(Name, Init->getSourceRange(),
                    Acc + ".prepare(" + Context.text(Init->getSourceRange()) + ")");
  }
  Context.applied(Name, Var->getLocation());
}

void PrepareCheck::prepareLoader(const VarDecl *Loader) {
  const CallExpr *Make = findMakeDataLoaderCall(Loader->getInit());
  if (!Make || !Context.canEdit(Name, Make->getSourceRange()))
    return;
  if (!Loader->getType()->getContainedAutoType()) {
    warn(Loader->getLocation(), llvm::Twine("data loader '") + Loader->getName() +
                                    "' has a written-out type; declare it 'auto' and prepare it "
                                    "with accelerator.prepare_data_loader(...)");
    return;
  }
  const auto *Callee = dyn_cast<DeclRefExpr>(Make->getCallee()->IgnoreImplicit());
  if (!Callee)
    return;
  const std::string Acc = accelerator(Make);
  if (Acc.empty())
    return;
  // make_data_loader<Sampler>(dataset, options) -> acc.prepare_data_loader<Sampler>(dataset, options)
  Context.replace(Name, SourceRange(Callee->getBeginLoc(), Callee->getNameInfo().getEndLoc()),
                  Acc + ".prepare_data_loader");
  Context.applied(Name, Loader->getLocation());
}

} // namespace accel::migrate
