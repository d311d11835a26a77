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
    : Ctx(Ctx), Options(Options), Result(Result) {
  if (!Options.HeaderFilter.empty())
    HeaderFilter.emplace(Options.HeaderFilter);
  const SourceManager &SM = Ctx.getSourceManager();
  MainDirectory =
      llvm::sys::path::parent_path(pathOf(SM.getLocForStartOfFile(SM.getMainFileID()))).str();
  WorkingDirectory = Options.WorkingDirectory;
  // Matchers and analyses visit only what we may edit, not the whole of LibTorch.
  std::vector<Decl *> Scope;
  for (Decl *D : Ctx.getTranslationUnitDecl()->decls())
    if (isEditable(SM.getExpansionLoc(D->getLocation())))
      Scope.push_back(D);
  Ctx.setTraversalScope(Scope);
  Facts.analyze(Ctx, [this](SourceLocation Loc) { return isEditable(Loc); });
}

std::string MigrationContext::pathOf(SourceLocation Loc) const {
  const SourceManager &SM = Ctx.getSourceManager();
  const FileEntry *Entry = SM.getFileEntryForID(SM.getFileID(SM.getFileLoc(Loc)));
  if (!Entry)
    return {};
  llvm::StringRef Real = Entry->tryGetRealPathName();
  if (!Real.empty())
    return Real.str();
  llvm::SmallString<256> Path(Entry->getName());
  llvm::sys::fs::make_absolute(Path);
  llvm::sys::path::remove_dots(Path, /*remove_dot_dot=*/true);
  return std::string(Path);
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
  const std::string Path = pathOf(Start);
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

std::string MigrationContext::text(SourceRange TokenRange) const {
  return text(CharSourceRange::getTokenRange(TokenRange));
}

std::string MigrationContext::text(CharSourceRange Range) const {
  return Lexer::getSourceText(Range, Ctx.getSourceManager(), Ctx.getLangOpts()).str();
}

std::string MigrationContext::indentation(SourceLocation Loc) const {
  const SourceManager &SM = Ctx.getSourceManager();
  Loc = SM.getFileLoc(Loc);
  const auto [FID, Offset] = SM.getDecomposedLoc(Loc);
  const StringRef Buffer = SM.getBufferData(FID);
  size_t LineStart = Buffer.rfind('\n', Offset);
  LineStart = LineStart == StringRef::npos ? 0 : LineStart + 1;
  size_t End = LineStart;
  while (End < Buffer.size() && (Buffer[End] == ' ' || Buffer[End] == '\t'))
    ++End;
  return Buffer.substr(LineStart, End - LineStart).str();
}

std::string MigrationContext::indentStep(SourceLocation Loc) const {
  const SourceManager &SM = Ctx.getSourceManager();
  const StringRef Buffer = SM.getBufferData(SM.getFileID(SM.getFileLoc(Loc)));
  // The smallest non-zero indentation of any line is the file's step.
  size_t Best = 0;
  bool Tabs = false;
  for (size_t Pos = 0; Pos < Buffer.size();) {
    size_t Width = 0;
    while (Pos + Width < Buffer.size() &&
           (Buffer[Pos + Width] == ' ' || Buffer[Pos + Width] == '\t'))
      ++Width;
    if (Width > 0 && Pos + Width < Buffer.size() && Buffer[Pos + Width] != '\n' &&
        (Best == 0 || Width < Best)) {
      Best = Width;
      Tabs = Buffer[Pos] == '\t';
    }
    const size_t Next = Buffer.find('\n', Pos);
    if (Next == StringRef::npos)
      break;
    Pos = Next + 1;
  }
  if (Best == 0)
    return "  ";
  return std::string(Tabs ? 1 : Best, Tabs ? '\t' : ' ');
}

std::string MigrationContext::referenceDeclaration(SourceLocation Loc, StringRef Type,
                                                   StringRef Name) const {
  const SourceManager &SM = Ctx.getSourceManager();
  Loc = SM.getFileLoc(Loc);
  format::FormatStyle::PointerAlignmentStyle Alignment = format::FormatStyle::PAS_Right;
  withStyleOf(pathOf(Loc), SM.getBufferData(SM.getFileID(Loc)),
              [&](format::FormatStyle &Style) { Alignment = Style.PointerAlignment; });
  switch (Alignment) {
  case format::FormatStyle::PAS_Left:
    return (Type + "& " + Name).str();
  case format::FormatStyle::PAS_Middle:
    return (Type + " & " + Name).str();
  case format::FormatStyle::PAS_Right:
    break;
  }
  return (Type + " &" + Name).str();
}

SourceLocation MigrationContext::afterStatement(const Stmt *S) const {
  const SourceManager &SM = Ctx.getSourceManager();
  const SourceLocation End = S->getEndLoc();
  if (isa<CompoundStmt>(S) || isa<DeclStmt>(S) || isa<NullStmt>(S))
    return Lexer::getLocForEndOfToken(End, 0, SM, Ctx.getLangOpts());
  const SourceLocation AfterSemi =
      Lexer::findLocationAfterToken(End, tok::semi, SM, Ctx.getLangOpts(), false);
  if (AfterSemi.isValid())
    return AfterSemi;
  return Lexer::getLocForEndOfToken(End, 0, SM, Ctx.getLangOpts());
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
  FileResult &File = Result.Files[pathOf(FileRange.getBegin())];
  Edit E{BeginOffset, EndOffset - BeginOffset, NewText.str(), Check.str(), Reformat};
  if (!File.Edits.add(E) && !File.Edits.compose(E, SM.getBufferData(BeginFID))) {
    const PresumedLoc P = SM.getPresumedLoc(FileRange.getBegin());
    File.Warnings.insert(Warning{pathOf(FileRange.getBegin()), P.getLine(), P.getColumn(),
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
  const SourceLocation End = afterStatement(S);
  const auto [FID, Offset] = SM.getDecomposedLoc(End);
  const StringRef Buffer = SM.getBufferData(FID);
  size_t Pos = Offset;
  while (Pos < Buffer.size() && (Buffer[Pos] == ' ' || Buffer[Pos] == '\t'))
    ++Pos;
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
                 (indentation(Loc) + Line + "\n").str());
}

SourceLocation MigrationContext::afterPreviousToken(SourceLocation Loc) const {
  const SourceManager &SM = Ctx.getSourceManager();
  const auto [FID, Offset] = SM.getDecomposedLoc(SM.getFileLoc(Loc));
  const StringRef Buffer = SM.getBufferData(FID);
  size_t Pos = Offset;
  while (Pos > 0 && isspace(static_cast<unsigned char>(Buffer[Pos - 1])))
    --Pos;
  return Loc.getLocWithOffset(static_cast<int>(Pos) - static_cast<int>(Offset));
}

void MigrationContext::removeStatement(StringRef Check, const Stmt *S) {
  const SourceManager &SM = Ctx.getSourceManager();
  SourceLocation Begin = S->getBeginLoc();
  SourceLocation End = afterStatement(S);
  const auto [FID, BeginOffset] = SM.getDecomposedLoc(Begin);
  const unsigned EndOffset = SM.getFileOffset(End);
  const StringRef Buffer = SM.getBufferData(FID);
  // Whole line when only whitespace surrounds the statement.
  size_t LineStart = BeginOffset;
  while (LineStart > 0 && (Buffer[LineStart - 1] == ' ' || Buffer[LineStart - 1] == '\t'))
    --LineStart;
  size_t LineEnd = EndOffset;
  while (LineEnd < Buffer.size() && (Buffer[LineEnd] == ' ' || Buffer[LineEnd] == '\t'))
    ++LineEnd;
  if ((LineStart == 0 || Buffer[LineStart - 1] == '\n') &&
      (LineEnd == Buffer.size() || Buffer[LineEnd] == '\n')) {
    Begin = Begin.getLocWithOffset(static_cast<int>(LineStart) - static_cast<int>(BeginOffset));
    End = End.getLocWithOffset(static_cast<int>(LineEnd) - static_cast<int>(EndOffset) +
                               (LineEnd < Buffer.size() ? 1 : 0));
  }
  addEdit(Check, CharSourceRange::getCharRange(Begin, End), "");
}

void MigrationContext::applied(StringRef Check, SourceLocation Anchor) {
  const SourceManager &SM = Ctx.getSourceManager();
  Anchor = SM.getFileLoc(Anchor);
  if (!isEditable(Anchor))
    return;
  Result.Files[pathOf(Anchor)].Applied.emplace(Check.str(), SM.getFileOffset(Anchor));
}

void MigrationContext::warn(StringRef Check, SourceLocation Loc, const llvm::Twine &Message) {
  const SourceManager &SM = Ctx.getSourceManager();
  Loc = SM.getExpansionLoc(Loc);
  if (!isEditable(Loc))
    return;
  const std::string Path = pathOf(Loc);
  const PresumedLoc P = SM.getPresumedLoc(Loc);
  const std::string Text = Message.str();
  Result.Files[Path].Warnings.insert(Warning{Path, P.getLine(), P.getColumn(), Text, Check.str()});
  if (!Options.Annotate)
    return;
  // The comment goes on its own line above; not again when a previous run left it.
  const auto [FID, Offset] = SM.getDecomposedLoc(Loc);
  const StringRef Buffer = SM.getBufferData(FID);
  size_t LineStart = Buffer.rfind('\n', Offset);
  LineStart = LineStart == StringRef::npos ? 0 : LineStart + 1;
  const std::string Comment = "// accel-migrate: " + Text;
  const size_t PrevEnd = LineStart == 0 ? StringRef::npos : LineStart - 1;
  if (PrevEnd != StringRef::npos) {
    size_t PrevStart = Buffer.rfind('\n', PrevEnd);
    PrevStart = PrevStart == StringRef::npos ? 0 : PrevStart + 1;
    if (Buffer.substr(PrevStart, PrevEnd - PrevStart).trim() == Comment)
      return;
  }
  const SourceLocation LineLoc = SM.getLocForStartOfFile(FID).getLocWithOffset(LineStart);
  addEdit(Check, CharSourceRange::getCharRange(LineLoc, LineLoc),
          indentation(LineLoc) + Comment + "\n", /*Reformat=*/false); // a long line, left whole
}

const Stmt *MigrationContext::parentStmt(const Stmt *S) {
  // Through declarations: the initializer of `auto x = ...;` has the VarDecl as parent, whose
  // parent is the DeclStmt.
  DynTypedNode Node = DynTypedNode::create(*S);
  for (unsigned Guard = 0; Guard < 8; ++Guard) {
    const auto Parents = Ctx.getParents(Node);
    if (Parents.empty())
      return nullptr;
    if (const auto *P = Parents[0].get<Stmt>())
      return P;
    if (!Parents[0].get<VarDecl>())
      return nullptr;
    Node = Parents[0];
  }
  return nullptr;
}

const FunctionDecl *MigrationContext::enclosingFunction(const Stmt *S) {
  DynTypedNode Node = DynTypedNode::create(*S);
  for (unsigned Guard = 0; Guard < 256; ++Guard) {
    const auto Parents = Ctx.getParents(Node);
    if (Parents.empty())
      return nullptr;
    Node = Parents[0];
    if (const auto *FD = Node.get<FunctionDecl>())
      return patternOf(FD);
    if (const auto *Lambda = Node.get<LambdaExpr>())
      return Lambda->getCallOperator();
  }
  return nullptr;
}

std::string MigrationContext::requireAccelerator(const FunctionDecl *Fn) {
  Fn = patternOf(Fn);
  if (std::string Existing = Facts.acceleratorIn(Fn); !Existing.empty())
    return Existing;
  if (Fn == Facts.host()) {
    HostNeedsAccelerator = true;
    return "accelerator";
  }
  NeedAccelerator.insert(Fn);
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Fn);
      Method && !Method->isStatic() && !Method->getParent()->isLambda())
    return requireMemberAccelerator(Method->getParent());
  return "accelerator";
}

std::string MigrationContext::requireMemberAccelerator(const CXXRecordDecl *Class) {
  Class = Class->getCanonicalDecl();
  if (std::string Existing = Facts.acceleratorMemberOf(Class); !Existing.empty())
    return Existing;
  NeedMemberAccelerator.insert(Class);
  return "accelerator";
}

std::string MigrationContext::accelerator(StringRef Check, const Stmt *S) {
  // Walk out to the function; a lambda on the way sees that function's accelerator only when it
  // captures by reference.
  DynTypedNode Node = DynTypedNode::create(*S);
  for (unsigned Guard = 0; Guard < 256; ++Guard) {
    const auto Parents = Ctx.getParents(Node);
    if (Parents.empty())
      return {};
    Node = Parents[0];
    if (const auto *FD = Node.get<FunctionDecl>()) {
      const auto *Method = dyn_cast<CXXMethodDecl>(FD);
      if (!Method || !Method->getParent()->isLambda())
        return requireAccelerator(FD);
      if (Method->getParent()->getLambdaCaptureDefault() == LCD_ByRef)
        continue; // on to the lambda's enclosing function
      warn(Check, S->getBeginLoc(),
           "this lambda does not capture by reference, so it cannot reach the accelerator; "
           "capture it ([&]) and migrate this line by hand");
      return {};
    }
    if (const auto *Lambda = Node.get<LambdaExpr>();
        Lambda && Lambda->getCaptureDefault() != LCD_ByRef) {
      warn(Check, S->getBeginLoc(),
           "this lambda does not capture by reference, so it cannot reach the accelerator; "
           "capture it ([&]) and migrate this line by hand");
      return {};
    }
  }
  return {};
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

} // namespace accel::migrate

namespace accel::migrate {
const std::vector<IncludeDirective> &MigrationContext::includesOf(const std::string &Path) const {
  static const std::vector<IncludeDirective> None;
  if (!Includes)
    return None;
  auto It = Includes->find(Path);
  return It == Includes->end() ? None : It->second;
}
} // namespace accel::migrate
