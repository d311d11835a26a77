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
// used vtables at the end of the file, just before it instantiates them, each source adding to
// one list: this source, asked after the preamble's reader, drops from that list and from
// Sema's own what comes from a template of the preamble's. The file's own templates are still
// instantiated, as without a cache.
// What is dropped stays undefined, and Sema then checks that nothing used is undefined where
// nothing else could define it: a LibTorch template instantiated with a lambda (a type without
// linkage; c10::fmap from <torch/script.h>'s headers) would be an error. Those are taken out of
// the list Sema reads for that check, after the reader has added its own.
class DropPreambleInstantiations : public ExternalSemaSource {
public:
  explicit DropPreambleInstantiations(Sema &S) : S(S), SM(S.getSourceManager()) {}

  void ReadUsedVTables(SmallVectorImpl<ExternalVTableUse> &VTables) override {
    llvm::erase_if(VTables, [&](const ExternalVTableUse &Use) { return fromPreamble(Use.Record); });
    llvm::erase_if(S.VTableUses, [&](const Sema::VTableUse &Use) {
      if (!fromPreamble(Use.first))
        return false;
      S.VTablesUsed.erase(Use.first);
      return true;
    });
  }

  void ReadPendingInstantiations(
      SmallVectorImpl<std::pair<ValueDecl *, SourceLocation>> &Pending) override {
    auto Dropped = [&](const std::pair<ValueDecl *, SourceLocation> &P) {
      return patternFromPreamble(P.first);
    };
    llvm::erase_if(Pending, Dropped);
    llvm::erase_if(S.PendingInstantiations, Dropped);
  }

  void ReadUndefinedButUsed(llvm::MapVector<NamedDecl *, SourceLocation> &Undefined) override {
    Undefined.remove_if([&](const std::pair<NamedDecl *, SourceLocation> &Entry) {
      const auto *Value = dyn_cast<ValueDecl>(Entry.first);
      return Value && patternFromPreamble(Value);
    });
  }

private:
  bool patternFromPreamble(const ValueDecl *D) const {
    if (const auto *Fn = dyn_cast<FunctionDecl>(D))
      if (const FunctionDecl *Pattern = Fn->getTemplateInstantiationPattern())
        return fromPreamble(Pattern);
    if (const auto *Var = dyn_cast<VarDecl>(D))
      if (const VarDecl *Pattern = Var->getTemplateInstantiationPattern())
        return fromPreamble(Pattern);
    return fromPreamble(D);
  }

  bool fromPreamble(const Decl *D) const {
    return SM.isLoadedSourceLocation(SM.getExpansionLoc(D->getLocation()));
  }

  Sema &S;
  const SourceManager &SM;
};

// A consumer whose parse drops the preamble's instantiations. The source goes in at the file's
// first declaration: Sema::Initialize gives the preamble's reader its place among Sema's
// sources after the consumer's InitializeSema, and this source must be asked after it (it
// filters what the reader added; the reader hands its pending instantiations out once).
class DroppingConsumer : public SemaConsumer {
public:
  explicit DroppingConsumer(bool WithPreamble) : WithPreamble(WithPreamble) {}

  void InitializeSema(Sema &S) override { TheSema = &S; }
  void ForgetSema() override { TheSema = nullptr; }

  bool HandleTopLevelDecl(DeclGroupRef) override {
    if (WithPreamble && !Drop && TheSema &&
        dyn_cast_or_null<ExternalSemaSource>(TheSema->getASTContext().getExternalSource())) {
      // Sema's multiplexer holds its sources by plain pointer: this consumer owns the one it
      // adds, and outlives Sema (the action frees Sema first).
      Drop = std::make_unique<DropPreambleInstantiations>(*TheSema);
      TheSema->addExternalSource(Drop.get());
    }
    return true;
  }

private:
  bool WithPreamble;
  Sema *TheSema = nullptr;
  std::unique_ptr<DropPreambleInstantiations> Drop;
};

class MigrationConsumer : public DroppingConsumer {
public:
  MigrationConsumer(const MigrateOptions &Options, TranslationUnitResult &Result,
                    const IncludeIndex &Includes)
      : DroppingConsumer(Options.CachedPreamble), Options(Options), Result(Result),
        Includes(Includes) {}

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
class VerificationConsumer : public DroppingConsumer {
public:
  VerificationConsumer() : DroppingConsumer(/*WithPreamble=*/true) {}
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
