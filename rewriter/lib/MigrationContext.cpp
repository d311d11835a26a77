//===- MigrationContext.cpp -----------------------------------------------------------------===//
#include "MigrationContext.h"

#include "SourceStyle.h"
#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

using namespace clang;

namespace accel::migrate {

MigrationContext::MigrationContext(ASTContext &Ctx, const MigrateOptions &Options,
                                   TranslationUnitResult &Result)
    : Ctx(Ctx), Options(Options), Result(Result), Source(Ctx.getSourceManager(), Ctx.getLangOpts()),
      Reach(Ctx, Facts) {
  if (!Options.HeaderFilter.empty())
    HeaderFilter.emplace(Options.HeaderFilter);
  const SourceManager &SM = Ctx.getSourceManager();
  MainDirectory =
      llvm::sys::path::parent_path(Source.pathOf(SM.getLocForStartOfFile(SM.getMainFileID())))
          .str();
  WorkingDirectory = Options.WorkingDirectory;
  // Matchers and analyses visit only what we may edit, not the whole of LibTorch; what the cached
  // preamble holds is not even read (noload_decls leaves it on disk).
  std::vector<Decl *> Scope;
  auto addEditable = [&](Decl *D) {
    if (isEditable(SM.getExpansionLoc(D->getLocation())))
      Scope.push_back(D);
  };
  if (Options.CachedPreamble)
    llvm::for_each(Ctx.getTranslationUnitDecl()->noload_decls(), addEditable);
  else
    llvm::for_each(Ctx.getTranslationUnitDecl()->decls(), addEditable);
  Ctx.setTraversalScope(Scope);
  Facts.analyze(
      Ctx, [this](SourceLocation Loc) { return isEditable(Loc); }, Options.OtherFiles);
}

bool MigrationContext::isEditableFile(FileID FID) const {
  auto [It, Inserted] = EditableFiles.try_emplace(FID.getHashValue(), false);
  if (!Inserted)
    return It->second;
  const SourceManager &SM = Ctx.getSourceManager();
  if (FID == SM.getMainFileID())
    return It->second = true;
  const SourceLocation Start = SM.getLocForStartOfFile(FID);
  if (SM.isInSystemHeader(Start) || !SM.getFileEntryForID(FID))
    return It->second = false;
  const std::string Path = Source.pathOf(Start);
  // LibTorch's and accel's own headers, even where a project vendors them and includes them
  // with -I.
  for (llvm::StringRef Library : {"/include/torch/", "/include/ATen/", "/include/c10/",
                                  "/include/caffe2/", "/include/accel/", "/torch/csrc/"})
    if (llvm::StringRef(Path).contains(Library))
      return It->second = false;
  if (HeaderFilter)
    return It->second = HeaderFilter->match(Path);
  // By default: user headers below the main file's directory, or below the working directory
  // when the main file is there too (`accel-migrate src/*.cpp -- -Iinclude` from the project).
  auto below = [&](const std::string &Directory) {
    return !Directory.empty() && llvm::StringRef(Path).startswith(Directory + "/");
  };
  return It->second = below(MainDirectory) ||
                      (below(WorkingDirectory) &&
                       llvm::StringRef(MainDirectory + "/").startswith(WorkingDirectory + "/"));
}

bool MigrationContext::isEditable(SourceLocation Loc) const {
  if (Loc.isInvalid() || Loc.isMacroID())
    return false;
  return isEditableFile(Ctx.getSourceManager().getFileID(Loc));
}

bool MigrationContext::canEdit(StringRef Check, SourceRange R) {
  const SourceManager &SM = Ctx.getSourceManager();
  if (R.getBegin().isMacroID() || R.getEnd().isMacroID()) {
    const SourceLocation Expansion = SM.getExpansionLoc(R.getBegin());
    if (isEditable(Expansion)) {
      const StringRef Macro = Lexer::getImmediateMacroName(R.getBegin(), SM, Ctx.getLangOpts());
      warn(Check, Expansion,
           llvm::Twine("code inside macro '") + Macro +
               "' is left as it is; expand the macro and migrate this line by hand");
    }
    return false;
  }
  return isEditable(R.getBegin()) && isEditable(R.getEnd());
}

void MigrationContext::addEdit(StringRef Check, CharSourceRange Range, StringRef NewText,
                               bool Reformat) {
  const SourceManager &SM = Ctx.getSourceManager();
  CharSourceRange FileRange = Lexer::makeFileCharRange(Range, SM, Ctx.getLangOpts());
  if (FileRange.isInvalid() || !isEditable(FileRange.getBegin()))
    return;
  const auto [BeginFID, BeginOffset] = SM.getDecomposedLoc(FileRange.getBegin());
  const auto [EndFID, EndOffset] = SM.getDecomposedLoc(FileRange.getEnd());
  if (BeginFID != EndFID || EndOffset < BeginOffset)
    return;
  FileResult &File = Result.Files[Source.pathOf(FileRange.getBegin())];
  Edit E{BeginOffset, EndOffset - BeginOffset, NewText.str(), Check.str(), Reformat};
  if (!File.Edits.add(E) && !File.Edits.compose(E, SM.getBufferData(BeginFID))) {
    const PresumedLoc P = SM.getPresumedLoc(FileRange.getBegin());
    File.Warnings.insert(Warning{Source.pathOf(FileRange.getBegin()), P.getLine(), P.getColumn(),
                                 "two transformations want to change this code differently; "
                                 "only the first is applied, migrate the rest by hand",
                                 Check.str()});
  }
}

void MigrationContext::replace(StringRef Check, SourceRange TokenRange, StringRef NewText) {
  addEdit(Check, CharSourceRange::getTokenRange(TokenRange), NewText);
}
void MigrationContext::replace(StringRef Check, CharSourceRange Range, StringRef NewText) {
  addEdit(Check, Range, NewText);
}
void MigrationContext::replaceFormatted(StringRef Check, CharSourceRange Range, StringRef NewText) {
  addEdit(Check, Range, NewText, /*Reformat=*/true);
}
void MigrationContext::insert(StringRef Check, SourceLocation Loc, StringRef NewText) {
  addEdit(Check, CharSourceRange::getCharRange(Loc, Loc), NewText, NewText.contains('\n'));
}
void MigrationContext::insertVerbatim(StringRef Check, SourceLocation Loc, StringRef NewText) {
  addEdit(Check, CharSourceRange::getCharRange(Loc, Loc), NewText, false);
}

void MigrationContext::insertLineAfter(StringRef Check, const Stmt *S, StringRef Indent,
                                       StringRef Line) {
  const SourceManager &SM = Ctx.getSourceManager();
  // A trailing `// comment` stays on S's line.
  const SourceLocation End = Source.afterTrailingComment(Source.afterStatement(S));
  const auto [FID, Offset] = SM.getDecomposedLoc(End);
  const StringRef Buffer = SM.getBufferData(FID);
  size_t Pos = Offset;
  while (Pos < Buffer.size() && (Buffer[Pos] == ' ' || Buffer[Pos] == '\t'))
    ++Pos;
  if (Pos + 1 < Buffer.size() && Buffer[Pos] == '\r' && Buffer[Pos + 1] == '\n')
    ++Pos; // a Windows line's end (the new line takes it: matchLineEndings)
  if (Pos < Buffer.size() && Buffer[Pos] == '\n') {
    insert(Check, End.getLocWithOffset(static_cast<int>(Pos - Offset) + 1),
           (Indent + Line + "\n").str());
    return;
  }
  insert(Check, End, ("\n" + Indent + Line).str());
}

void MigrationContext::insertLineBefore(StringRef Check, SourceLocation Loc, StringRef Line) {
  const SourceManager &SM = Ctx.getSourceManager();
  const auto [FID, Offset] = SM.getDecomposedLoc(SM.getFileLoc(Loc));
  const StringRef Buffer = SM.getBufferData(FID);
  size_t LineStart = Offset;
  while (LineStart > 0 && (Buffer[LineStart - 1] == ' ' || Buffer[LineStart - 1] == '\t'))
    --LineStart;
  if (LineStart > 0 && Buffer[LineStart - 1] != '\n') {
    insertVerbatim(Check, Loc, (Line + " ").str());
    return;
  }
  insertVerbatim(Check,
                 Loc.getLocWithOffset(static_cast<int>(LineStart) - static_cast<int>(Offset)),
                 (Source.indentation(Loc) + Line + "\n").str());
}

void MigrationContext::removeStatement(StringRef Check, const Stmt *S, bool Superseding) {
  const SourceManager &SM = Ctx.getSourceManager();
  SourceLocation Begin = S->getBeginLoc();
  SourceLocation End = Source.afterStatement(S);
  const auto [FID, BeginOffset] = SM.getDecomposedLoc(Begin);
  const unsigned EndOffset = SM.getFileOffset(End);
  const StringRef Buffer = SM.getBufferData(FID);
  // Whole line when only whitespace surrounds the statement.
  size_t LineStart = BeginOffset;
  while (LineStart > 0 && (Buffer[LineStart - 1] == ' ' || Buffer[LineStart - 1] == '\t'))
    --LineStart;
  // A trailing `// comment` is the removed statement's, and goes with it.
  size_t LineEnd = SM.getFileOffset(Source.afterTrailingComment(End));
  while (LineEnd < Buffer.size() && (Buffer[LineEnd] == ' ' || Buffer[LineEnd] == '\t'))
    ++LineEnd;
  if (LineEnd + 1 < Buffer.size() && Buffer[LineEnd] == '\r' && Buffer[LineEnd + 1] == '\n')
    ++LineEnd; // a file written on Windows: its line ends in \r\n
  if ((LineStart == 0 || Buffer[LineStart - 1] == '\n') &&
      (LineEnd == Buffer.size() || Buffer[LineEnd] == '\n')) {
    Begin = Begin.getLocWithOffset(static_cast<int>(LineStart) - static_cast<int>(BeginOffset));
    End = End.getLocWithOffset(static_cast<int>(LineEnd) - static_cast<int>(EndOffset) +
                               (LineEnd < Buffer.size() ? 1 : 0));
  }
  if (Superseding && isEditable(Begin))
    Result.Files[Source.pathOf(Begin)].Edits.eraseInside(
        SM.getFileOffset(Begin), SM.getFileOffset(End) - SM.getFileOffset(Begin));
  addEdit(Check, CharSourceRange::getCharRange(Begin, End), "");
}

void MigrationContext::applied(StringRef Check, SourceLocation Anchor) {
  const SourceManager &SM = Ctx.getSourceManager();
  Anchor = SM.getFileLoc(Anchor);
  if (!isEditable(Anchor))
    return;
  Result.Files[Source.pathOf(Anchor)].Applied.emplace(Check.str(), SM.getFileOffset(Anchor));
}

void MigrationContext::refuse(StringRef Check, SourceLocation Loc, const llvm::Twine &Message) {
  const SourceManager &SM = Ctx.getSourceManager();
  Loc = SM.getExpansionLoc(Loc);
  const PresumedLoc P = SM.getPresumedLoc(Loc);
  Result.Refusals.insert(
      Warning{Source.pathOf(Loc), P.getLine(), P.getColumn(), Message.str(), Check.str()});
}

void MigrationContext::warn(StringRef Check, SourceLocation Loc, const llvm::Twine &Message) {
  const SourceManager &SM = Ctx.getSourceManager();
  Loc = SM.getExpansionLoc(Loc);
  if (!isEditable(Loc))
    return;
  const std::string Path = Source.pathOf(Loc);
  const PresumedLoc P = SM.getPresumedLoc(Loc);
  const std::string Text = Message.str();
  Result.Files[Path].Warnings.insert(Warning{Path, P.getLine(), P.getColumn(), Text, Check.str()});
  if (!Options.Annotate)
    return;
  // The comment goes on its own line above; not again when a previous run left it.
  const auto [FID, Offset] = SM.getDecomposedLoc(Loc);
  const StringRef Buffer = SM.getBufferData(FID);
  const size_t LineStart = SourceText::lineStart(Buffer, Offset);
  const std::string Comment = "// accel-migrate: " + Text;
  if (LineStart > 0) {
    const size_t PrevEnd = LineStart - 1, PrevStart = SourceText::lineStart(Buffer, PrevEnd);
    if (Buffer.substr(PrevStart, PrevEnd - PrevStart).trim() == Comment)
      return;
  }
  const SourceLocation LineLoc = SM.getLocForStartOfFile(FID).getLocWithOffset(LineStart);
  addEdit(Check, CharSourceRange::getCharRange(LineLoc, LineLoc),
          Source.indentation(LineLoc) + Comment + "\n",
          /*Reformat=*/false); // a long line, left whole
}

std::string MigrationContext::accelerator(StringRef Check, const Stmt *S) {
  std::string Why;
  std::string Name = Reach.accelerator(S, Why);
  if (Name.empty() && !Why.empty())
    warn(Check, S->getBeginLoc(), Why);
  return Name;
}

std::vector<std::string> MigrationContext::editedFiles() const {
  std::vector<std::string> Files;
  for (const auto &[Path, File] : Result.Files)
    if (!File.Edits.empty())
      Files.push_back(Path);
  return Files;
}

const FileResult *MigrationContext::resultFor(const std::string &Path) const {
  auto It = Result.Files.find(Path);
  return It == Result.Files.end() ? nullptr : &It->second;
}

const std::vector<IncludeDirective> &MigrationContext::includesOf(const std::string &Path) const {
  static const std::vector<IncludeDirective> None;
  if (!Includes)
    return None;
  auto It = Includes->find(Path);
  return It == Includes->end() ? None : It->second;
}

} // namespace accel::migrate
