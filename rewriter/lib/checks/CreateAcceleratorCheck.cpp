//===- CreateAcceleratorCheck.cpp -----------------------------------------------------------===//
#include "CreateAcceleratorCheck.h"

#include "StatementUtils.h"
#include "TorchPatterns.h"

#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/Lex/Lexer.h"

#include <algorithm>

using namespace clang;

namespace accel::migrate {

void CreateAcceleratorCheck::finish() {
  // What other files of the program define and give the accelerator to: this file passes it.
  const ProgramSummary &OtherFiles = Context.options().OtherFiles;
  if (!OtherFiles.TakeAccelerator.empty()) {
    for (const FunctionDecl *Callee : Context.facts().calledFunctions())
      if (!Callee->hasBody() && OtherFiles.takesAccelerator(usrOf(Callee)))
        Context.reach().requireAccelerator(Callee);
    for (const CXXRecordDecl *Class : Context.facts().constructedClasses())
      if (OtherFiles.takesAccelerator(usrOf(Class)))
        Context.reach().requireMemberAccelerator(Class);
  }
  // Functions other than the host get the accelerator as their first parameter, and their
  // callers pass theirs; classes get a member, and whoever constructs them passes theirs. Either
  // may make the callers need one in turn: a worklist over both.
  const auto &Functions = Context.reach().functionsNeedingAccelerator();
  const auto &Classes = Context.reach().classesNeedingAccelerator();
  for (size_t F = 0, C = 0; F < Functions.size() || C < Classes.size();) {
    for (; F < Functions.size(); ++F)
      addParameter(Functions[F]);
    for (; C < Classes.size(); ++C)
      addMember(Classes[C]);
  }
  createInHost();
}

void CreateAcceleratorCheck::addParameter(const FunctionDecl *Fn) {
  if (Fn->isMain()) {
    warn(Fn->getLocation(), "main uses the accelerator but is not where it is created");
    return;
  }
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Fn); Method && !Method->isStatic())
    return; // reaches it through its class's member (addMember)
  // Called through a pointer or handed over as a callback: the call that would pass the
  // accelerator is not here to edit. Changing the signature would break the program; leaving it
  // would not declare the accelerator the body now uses. Nothing is changed.
  if (const DeclRefExpr *Use = Context.facts().usedAsValue(Fn)) {
    const SourceManager &SM = Context.sourceManager();
    const PresumedLoc At = SM.getPresumedLoc(SM.getExpansionLoc(Use->getLocation()));
    Context.refuse(Name, Fn->getLocation(),
                   llvm::Twine("'") + Fn->getNameAsString() +
                       "' needs the accelerator as a parameter, but it is also used as a value "
                       "at line " +
                       llvm::Twine(At.getLine()) + ":" + llvm::Twine(At.getColumn()) +
                       " (a function pointer or a callback), whose calls cannot be given it; "
                       "nothing was changed: give it the accelerator by hand (a lambda that "
                       "captures it) and run accel-migrate again");
    return;
  }
  // Every declaration of the function we may edit gets the parameter.
  bool Edited = false;
  for (const FunctionDecl *Decl : Fn->redecls())
    Edited |= insertParameter(Decl);
  if (!Edited)
    return;
  const auto &Calls = Context.facts().callsTo(Fn);
  if (Calls.empty() && !Context.options().OtherFiles.called(usrOf(Fn)))
    warn(Fn->getLocation(),
         llvm::Twine("'") + Fn->getNameAsString() +
             "' now takes the accelerator as its first parameter; pass it at its calls in "
             "other files");
  for (const CallExpr *Call : Calls) {
    if (!Context.canEdit(Name, Call->getSourceRange()))
      continue;
    if (const std::string Acc = accelerator(Call); !Acc.empty())
      passFirst(Call, Acc);
  }
}

bool CreateAcceleratorCheck::insertParameter(const FunctionDecl *Decl) {
  const FunctionTypeLoc Loc = Decl->getFunctionTypeLoc();
  if (!Loc || !Context.isEditable(Loc.getLParenLoc()))
    return false;
  const std::string Parameter = Context.source().referenceDeclaration(
      Loc.getLParenLoc(), "accel::Accelerator", "accelerator");
  std::vector<SourceLocation> Params;
  for (const ParmVarDecl *Param : Decl->parameters())
    Params.push_back(Param->getBeginLoc());
  insertFirst(Loc.getLParenLoc(), Params, Parameter, Loc.getLParenLoc().getLocWithOffset(1));
  Context.applied(Name, Loc.getLParenLoc());
  return true;
}

void CreateAcceleratorCheck::passFirst(const CallExpr *Call, const std::string &Acc) {
  const std::vector<const Expr *> Args = explicitArgs(Call);
  if (Args.empty()) {
    Context.insert(Name, Call->getRParenLoc(), Acc);
    return;
  }
  std::vector<SourceLocation> Begins;
  for (const Expr *Arg : Args)
    Begins.push_back(Arg->getBeginLoc());
  const SourceLocation Open = Context.source().afterPreviousToken(Args.front()->getBeginLoc());
  insertFirst(Open, Begins, Acc, Args.front()->getBeginLoc());
}

void CreateAcceleratorCheck::insertFirst(SourceLocation Open, llvm::ArrayRef<SourceLocation> Items,
                                         const std::string &Item, SourceLocation Inline) {
  if (Items.empty()) {
    Context.insert(Name, Inline, Item);
    return;
  }
  // A list laid out one per line gets a line of its own for the new item.
  if (const auto LineStart = Context.source().itemLineStart(Open, Items))
    Context.insertVerbatim(Name, Items.front(), Item + ",\n" + *LineStart);
  else
    Context.insert(Name, Inline, Item + ", ");
}

void CreateAcceleratorCheck::addMember(const CXXRecordDecl *Class) {
  Class = Class->getDefinition();
  if (!Class || !Context.facts().acceleratorMemberOf(Class).empty())
    return;
  if (!Context.canEdit(Name, Class->getSourceRange()))
    return;
  const bool HasConstructor = llvm::any_of(Class->ctors(), isWrittenConstructor);
  // The member comes before every other member, so that their initializers may use it (a member
  // optimizer is prepared where it is initialized).
  const auto Fields = Class->fields();
  // A class without a constructor gets one that binds the member, where it can be public: before
  // the first member, when that member is public. Elsewhere the class cannot hold the accelerator
  // as written: the migration is refused rather than left not compiling.
  const bool FirstPublic =
      Fields.begin() == Fields.end() ? Class->isStruct() : Fields.begin()->getAccess() == AS_public;
  if (!HasConstructor && !FirstPublic) {
    Context.refuse(Name, Class->getLocation(),
                   llvm::Twine("class '") + Class->getName() +
                       "' must now hold an accel::Accelerator& member, and has no constructor to "
                       "bind it; give it one that takes 'accel::Accelerator &accelerator' and "
                       "binds the member, then migrate again");
    return;
  }
  const std::string Member = Context.source().referenceDeclaration(
                                 Class->getLocation(), "accel::Accelerator", "accelerator") +
                             ";";
  const std::string Constructor =
      HasConstructor ? std::string()
                     : "explicit " + Class->getNameAsString() + "(" +
                           Context.source().referenceDeclaration(
                               Class->getLocation(), "accel::Accelerator", "accelerator") +
                           ") : accelerator(accelerator) {}";
  if (Fields.begin() != Fields.end()) {
    if (!Constructor.empty())
      Context.insertLineBefore(Name, Fields.begin()->getBeginLoc(), Constructor);
    Context.insertLineBefore(Name, Fields.begin()->getBeginLoc(), Member);
  } else {
    const SourceLocation Brace = Class->getBraceRange().getBegin();
    const std::string Indent = "\n" + Context.source().indentation(Class->getBeginLoc()) +
                               Context.source().indentStep(Class->getBeginLoc());
    Context.insert(Name, Brace.getLocWithOffset(1),
                   (Constructor.empty() ? "" : Indent + Constructor) + Indent + Member);
  }
  Context.applied(Name, Class->getLocation());

  // Every constructor takes the accelerator first and binds the member to it.
  for (const CXXConstructorDecl *Ctor : Class->ctors()) {
    if (!isWrittenConstructor(Ctor))
      continue;
    for (const FunctionDecl *Decl : Ctor->redecls())
      addConstructorParameter(cast<CXXConstructorDecl>(Decl));
  }

  // Whoever constructs the class passes theirs.
  const auto &Sites = Context.facts().constructionsOf(Class);
  if (Sites.empty() && !Context.options().OtherFiles.called(usrOf(Class)))
    warn(Class->getLocation(),
         llvm::Twine("the constructors of '") + Class->getName() +
             "' now take the accelerator first; pass it where the class is created in other files");
  for (const Expr *Site : Sites)
    passAccelerator(Site);
}

void CreateAcceleratorCheck::addConstructorParameter(const CXXConstructorDecl *Ctor) {
  if (Ctor->isExplicitlyDefaulted()) {
    bindInDefaultedConstructor(Ctor);
    return;
  }
  if (!insertParameter(Ctor))
    return;
  // A delegating constructor passes it on (its target's construction is a site like any other).
  if (!Ctor->doesThisDeclarationHaveABody() || Ctor->isDelegatingConstructor())
    return;
  // The member initializer goes first among the member initializers (they run in declaration
  // order and the member is declared first; -Wreorder), after any base initializers.
  const CXXCtorInitializer *FirstMember = nullptr, *LastWritten = nullptr;
  for (const CXXCtorInitializer *Init : Ctor->inits()) {
    if (!Init->isWritten())
      continue;
    if (!FirstMember && Init->isAnyMemberInitializer())
      FirstMember = Init;
    if (!LastWritten || Context.sourceManager().isBeforeInTranslationUnit(
                            LastWritten->getSourceLocation(), Init->getSourceLocation()))
      LastWritten = Init;
  }
  if (FirstMember)
    Context.insert(Name, FirstMember->getSourceLocation(), "accelerator(accelerator), ");
  else if (LastWritten)
    Context.insert(Name, Context.source().afterPreviousToken(Ctor->getBody()->getBeginLoc()),
                   ", accelerator(accelerator)");
  else
    Context.insert(Name, Context.source().afterPreviousToken(Ctor->getBody()->getBeginLoc()),
                   " : accelerator(accelerator)");
}

void CreateAcceleratorCheck::bindInDefaultedConstructor(const CXXConstructorDecl *Ctor) {
  // `T() = default;` has no initializer list to bind the member in: it becomes
  // `T(accel::Accelerator &accelerator) : accelerator(accelerator) {}`. Only when its text ends
  // in `= default` as expected; anything else is left for the user, never spliced.
  const SourceManager &SM = Context.sourceManager();
  const SourceLocation Begin = Ctor->getBeginLoc(), End = Ctor->getEndLoc();
  const std::string Text = Context.source().text(SourceRange(Begin, End));
  const size_t Equals = Text.rfind('=');
  const bool Expected = Begin.isFileID() && End.isFileID() && Equals != std::string::npos &&
                        llvm::StringRef(Text).substr(Equals + 1).trim() == "default";
  if (!Expected || !Context.canEdit(Name, SourceRange(Begin, End))) {
    warn(Ctor->getLocation(), "this defaulted constructor cannot bind the accel::Accelerator& "
                              "member; give it a parameter 'accel::Accelerator &accelerator' "
                              "and the initializer ': accelerator(accelerator)'");
    return;
  }
  if (!insertParameter(Ctor))
    return;
  // Through the `;` that ends the declaration, which a body does not take.
  SourceLocation Stop = Lexer::getLocForEndOfToken(End, 0, SM, Context.ast().getLangOpts());
  const char *After = SM.getCharacterData(Stop);
  size_t Skip = 0;
  while (After[Skip] == ' ' || After[Skip] == '\t')
    ++Skip;
  if (After[Skip] == ';')
    Stop = Stop.getLocWithOffset(static_cast<int>(Skip) + 1);
  const SourceLocation EqualsLoc = Begin.getLocWithOffset(static_cast<int>(Equals));
  Context.replace(Name, CharSourceRange::getCharRange(EqualsLoc, Stop),
                  ": accelerator(accelerator) {}");
}

void CreateAcceleratorCheck::passAccelerator(const Expr *Site) {
  if (!Context.canEdit(Name, Site->getSourceRange()))
    return;
  const std::string Acc = accelerator(Site);
  if (Acc.empty())
    return;
  const SourceManager &SM = Context.sourceManager();
  const LangOptions &Lang = Context.ast().getLangOpts();
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(Site)) {
    const SourceRange Parens = Construct->getParenOrBraceRange();
    if (Parens.isValid()) {
      const auto FirstWritten =
          std::find_if(Construct->arg_begin(), Construct->arg_end(),
                       [](const Expr *Arg) { return !isa<CXXDefaultArgExpr>(Arg); });
      if (FirstWritten == Construct->arg_end())
        Context.insert(Name, Parens.getBegin().getLocWithOffset(1), Acc);
      else
        Context.insert(Name, (*FirstWritten)->getBeginLoc(), Acc + ", ");
    } else {
      // `Trainer trainer;` or `new Trainer`: no parentheses yet.
      const DynTypedNodeList Parents = Context.ast().getParents(*Construct);
      const Expr *Whole = Construct;
      if (!Parents.empty())
        if (const auto *New = Parents[0].get<CXXNewExpr>())
          Whole = New;
      const SourceLocation End = Lexer::getLocForEndOfToken(Whole->getEndLoc(), 0, SM, Lang);
      Context.insert(Name, End, "(" + Acc + ")");
    }
  } else if (const auto *Call = dyn_cast<CallExpr>(Site)) {
    passFirst(Call, Acc);
  }
  Context.applied(Name, Site->getBeginLoc());
}

void CreateAcceleratorCheck::createInHost() {
  const FunctionDecl *Host = Context.facts().host();
  if (!Host || !Context.reach().hostNeedsAccelerator() ||
      !Context.facts().acceleratorIn(Host).empty())
    return;
  const auto *Body = dyn_cast_or_null<CompoundStmt>(Host->getBody());
  if (!Body || !Context.canEdit(Name, Body->getSourceRange()))
    return;
  std::string Options;
  const MigrateOptions &Opts = Context.options();
  if (Opts.MixedPrecision)
    Options += ".mixed_precision(\"" + *Opts.MixedPrecision + "\")";
  if (Opts.GradientAccumulationSteps)
    Options +=
        ".gradient_accumulation_steps(" + std::to_string(*Opts.GradientAccumulationSteps) + ")";
  const std::string Declaration =
      Options.empty()
          ? "accel::Accelerator accelerator;"
          : "accel::Accelerator accelerator(accel::AcceleratorOptions()" + Options + ");";
  const std::string Indent = Body->body_empty()
                                 ? Context.source().indentStep(Body->getBeginLoc())
                                 : Context.source().indentation(Body->body_front()->getBeginLoc());
  Context.insert(Name,
                 Context.source().afterTrailingComment(Body->getLBracLoc().getLocWithOffset(1)),
                 "\n" + Indent + Declaration);
  Context.applied(Name, Body->getLBracLoc());
}

} // namespace accel::migrate
