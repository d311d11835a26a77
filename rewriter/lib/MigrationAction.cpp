//===- MigrationAction.cpp ------------------------------------------------------------------===//
#include "MigrationAction.h"

#include "CheckRegistry.h"
#include "MigrationContext.h"

#include "clang/AST/ASTConsumer.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendAction.h"
#include "clang/Lex/PPCallbacks.h"
#include "clang/Lex/Preprocessor.h"
#include "clang/Sema/ExternalSemaSource.h"
#include "clang/Sema/Sema.h"
#include "clang/Sema/SemaConsumer.h"

using namespace clang;

namespace accel::migrate {

namespace {

// Records every #include with where its line ends, for add-include.
class IncludeRecorder : public PPCallbacks {
public:
  IncludeRecorder(const SourceManager &SM, IncludeIndex &Index) : SM(SM), Index(Index) {}
  void InclusionDirective(SourceLocation HashLoc, const Token &, StringRef FileName, bool,
                          CharSourceRange FilenameRange, const FileEntry *, StringRef, StringRef,
                          const Module *, SrcMgr::CharacteristicKind) override {
    if (HashLoc.isMacroID())
      return;
    const FileEntry *Entry = SM.getFileEntryForID(SM.getFileID(HashLoc));
    if (!Entry)
      return;
    std::string Path = Entry->tryGetRealPathName().str();
    if (Path.empty())
      return;
    // The end of the directive's line.
    const auto [FID, Offset] = SM.getDecomposedLoc(FilenameRange.getEnd());
    const StringRef Buffer = SM.getBufferData(FID);
    size_t End = Buffer.find('\n', Offset);
    if (End == StringRef::npos)
      End = Buffer.size();
    Index[Path].push_back(
        IncludeDirective{FileName.str(), SM.getLocForStartOfFile(FID).getLocWithOffset(End)});
  }

private:
  const SourceManager &SM;
  IncludeIndex &Index;
};

// With a cached preamble, the end of the file would instantiate the bodies of every LibTorch
// template the file uses, and of those the preamble's own headers left pending: LibTorch's code,
// which no check reads (matching stops at the project's own declarations) and which the
// preamble exists to skip. Sema asks its external sources for their pending instantiations and
// used vtables at the end of the file, just before it instantiates them: this source takes the
// preamble's lists first (the preamble's reader hands them out once) and drops, from those and
// from Sema's own, what comes from a template of the preamble's. The file's own templates are
// still instantiated, as without a cache.
class DropPreambleInstantiations : public ExternalSemaSource {
public:
  DropPreambleInstantiations(Sema &S, ExternalSemaSource &Preamble)
      : S(S), Preamble(Preamble), SM(S.getSourceManager()) {}

  void ReadUsedVTables(SmallVectorImpl<ExternalVTableUse> &VTables) override {
    SmallVector<ExternalVTableUse, 0> Theirs;
    Preamble.ReadUsedVTables(Theirs);
    for (const ExternalVTableUse &Use : Theirs)
      if (!fromPreamble(Use.Record))
        VTables.push_back(Use);
    llvm::erase_if(S.VTableUses, [&](const Sema::VTableUse &Use) {
      if (!fromPreamble(Use.first))
        return false;
      S.VTablesUsed.erase(Use.first);
      return true;
    });
  }

  void ReadPendingInstantiations(
      SmallVectorImpl<std::pair<ValueDecl *, SourceLocation>> &Pending) override {
    auto patternFromPreamble = [&](const std::pair<ValueDecl *, SourceLocation> &P) {
      if (const auto *Fn = dyn_cast<FunctionDecl>(P.first))
        if (const FunctionDecl *Pattern = Fn->getTemplateInstantiationPattern())
          return fromPreamble(Pattern);
      if (const auto *Var = dyn_cast<VarDecl>(P.first))
        if (const VarDecl *Pattern = Var->getTemplateInstantiationPattern())
          return fromPreamble(Pattern);
      return fromPreamble(P.first);
    };
    SmallVector<std::pair<ValueDecl *, SourceLocation>, 0> Theirs;
    Preamble.ReadPendingInstantiations(Theirs);
    for (const auto &P : Theirs)
      if (!patternFromPreamble(P))
        Pending.push_back(P);
    auto &Own = S.PendingInstantiations;
    Own.erase(std::remove_if(Own.begin(), Own.end(), patternFromPreamble), Own.end());
  }

private:
  bool fromPreamble(const Decl *D) const {
    return SM.isLoadedSourceLocation(SM.getExpansionLoc(D->getLocation()));
  }

  Sema &S;
  ExternalSemaSource &Preamble;
  const SourceManager &SM;
};

class MigrationConsumer : public SemaConsumer {
public:
  MigrationConsumer(const MigrateOptions &Options, TranslationUnitResult &Result,
                    const IncludeIndex &Includes)
      : Options(Options), Result(Result), Includes(Includes) {}

  void InitializeSema(Sema &Sema) override {
    if (!Options.CachedPreamble)
      return;
    if (auto *Preamble =
            dyn_cast_or_null<ExternalSemaSource>(Sema.getASTContext().getExternalSource())) {
      // Sema's multiplexer holds its sources by plain pointer: this consumer owns the one it
      // adds, and outlives Sema (the action frees Sema first).
      Drop = std::make_unique<DropPreambleInstantiations>(Sema, *Preamble);
      Sema.addExternalSource(Drop.get());
    }
  }

  void HandleTranslationUnit(ASTContext &Ctx) override {
    if (Ctx.getDiagnostics().hasErrorOccurred()) {
      Result.Failed = true;
      return;
    }
    MigrationContext Context(Ctx, Options, Result);
    Context.setIncludes(&Includes);
    ast_matchers::MatchFinder Finder;
    std::vector<std::unique_ptr<MigrationCheck>> Checks;
    for (const CheckInfo &Info : checkRegistry()) {
      if (!Options.enabled(Info.Name))
        continue;
      Checks.push_back(Info.Create(Context));
      Checks.back()->registerMatchers(Finder);
    }
    Finder.matchAST(Ctx);
    for (const auto &Check : Checks)
      Check->finish();
    exportSummary(Context);
  }

private:
  // What the other files of the program must know of this one (ProgramSummary).
  void exportSummary(MigrationContext &Context) {
    Result.Summary = Context.facts().summary();
    Result.Summary.Collectives = Context.exportedCollectives();
    Result.Summary.BindsAccelerator = !Context.reach().functionsNeedingAccelerator().empty();
  }

  const MigrateOptions &Options;
  TranslationUnitResult &Result;
  const IncludeIndex &Includes;
  std::unique_ptr<DropPreambleInstantiations> Drop;
};

class MigrationAction : public ASTFrontendAction {
public:
  MigrationAction(const MigrateOptions &Options, TranslationUnitResult &Result)
      : Options(Options), Result(Result) {}

  std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance &CI, StringRef) override {
    CI.getPreprocessor().addPPCallbacks(
        std::make_unique<IncludeRecorder>(CI.getSourceManager(), Includes));
    return std::make_unique<MigrationConsumer>(Options, Result, Includes);
  }
  void EndSourceFileAction() override {
    if (getCompilerInstance().getDiagnostics().hasErrorOccurred())
      Result.Failed = true;
  }

private:
  const MigrateOptions &Options;
  TranslationUnitResult &Result;
  IncludeIndex Includes;
};

class Factory : public tooling::FrontendActionFactory {
public:
  Factory(const MigrateOptions &Options, TranslationUnitResult &Result)
      : Options(Options), Result(Result) {}
  std::unique_ptr<FrontendAction> create() override {
    return std::make_unique<MigrationAction>(Options, Result);
  }
  // A failure with the cached preamble is recorded, not reported: the file is parsed again
  // without it, and that parse reports (ClangTool would print "Error while processing").
  bool runInvocation(std::shared_ptr<CompilerInvocation> Invocation, FileManager *Files,
                     std::shared_ptr<PCHContainerOperations> PCHContainerOps,
                     DiagnosticConsumer *DiagConsumer) override {
    const bool Ran = FrontendActionFactory::runInvocation(std::move(Invocation), Files,
                                                          std::move(PCHContainerOps), DiagConsumer);
    Result.Failed = Result.Failed || !Ran;
    return Ran || Options.CachedPreamble;
  }

private:
  const MigrateOptions &Options;
  TranslationUnitResult &Result;
};

// The verification's parse (MigrationVerifier): every error of the migrated program's own code,
// and, with a cached preamble, none of the library's template bodies, as the migration's parse.
class VerificationConsumer : public SemaConsumer {
public:
  void InitializeSema(Sema &Sema) override {
    if (auto *Preamble =
            dyn_cast_or_null<ExternalSemaSource>(Sema.getASTContext().getExternalSource())) {
      Drop = std::make_unique<DropPreambleInstantiations>(Sema, *Preamble);
      Sema.addExternalSource(Drop.get());
    }
  }

private:
  std::unique_ptr<DropPreambleInstantiations> Drop;
};

class VerificationAction : public ASTFrontendAction {
  std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance &, StringRef) override {
    return std::make_unique<VerificationConsumer>();
  }
};

} // namespace

std::unique_ptr<tooling::FrontendActionFactory>
newMigrationActionFactory(const MigrateOptions &Options, TranslationUnitResult &Result) {
  return std::make_unique<Factory>(Options, Result);
}

std::unique_ptr<tooling::FrontendActionFactory> newVerificationActionFactory() {
  return tooling::newFrontendActionFactory<VerificationAction>();
}

} // namespace accel::migrate
