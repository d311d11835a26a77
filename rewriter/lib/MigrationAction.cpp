//===- MigrationAction.cpp ------------------------------------------------------------------===//
#include "MigrationAction.h"

#include "CheckRegistry.h"
#include "MigrationContext.h"

#include "clang/AST/ASTConsumer.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendAction.h"
#include "clang/Lex/PPCallbacks.h"
#include "clang/Lex/Preprocessor.h"

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

class MigrationConsumer : public ASTConsumer {
public:
  MigrationConsumer(const MigrateOptions &Options, TranslationUnitResult &Result,
                    const IncludeIndex &Includes)
      : Options(Options), Result(Result), Includes(Includes) {}

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
      Check->onEndOfTranslationUnit();
  }

private:
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

private:
  const MigrateOptions &Options;
  TranslationUnitResult &Result;
};

} // namespace

std::unique_ptr<tooling::FrontendActionFactory>
newMigrationActionFactory(const MigrateOptions &Options, TranslationUnitResult &Result) {
  return std::make_unique<Factory>(Options, Result);
}

} // namespace accel::migrate
