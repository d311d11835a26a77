//===- SourceText.cpp -----------------------------------------------------------------------===//
#include "SourceText.h"

#include "SourceStyle.h"

#include "clang/AST/Stmt.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <vector>

using namespace clang;

namespace accel::migrate {

std::string SourceText::pathOf(SourceLocation Loc) const {
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

std::string SourceText::text(SourceRange TokenRange) const {
  return text(CharSourceRange::getTokenRange(TokenRange));
}

std::string SourceText::text(CharSourceRange Range) const {
  return Lexer::getSourceText(Range, SM, LangOpts).str();
}

size_t SourceText::lineStart(StringRef Text, size_t Offset) {
  // StringRef::rfind(C, From) looks strictly before From (std::string's looks at From too).
  const size_t NewLine = Text.rfind('\n', Offset);
  return NewLine == StringRef::npos ? 0 : NewLine + 1;
}

std::string SourceText::indentation(SourceLocation Loc) const {
  Loc = SM.getFileLoc(Loc);
  const auto [FID, Offset] = SM.getDecomposedLoc(Loc);
  const StringRef Buffer = SM.getBufferData(FID);
  const size_t LineStart = lineStart(Buffer, Offset);
  size_t End = LineStart;
  while (End < Buffer.size() && (Buffer[End] == ' ' || Buffer[End] == '\t'))
    ++End;
  return Buffer.substr(LineStart, End - LineStart).str();
}

std::string SourceText::indentStep(SourceLocation Loc) const {
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

std::string SourceText::referenceDeclaration(SourceLocation Loc, StringRef Type,
                                             StringRef Name) const {
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

SourceLocation SourceText::afterStatement(const Stmt *S) const {
  const SourceLocation End = S->getEndLoc();
  if (isa<CompoundStmt>(S) || isa<DeclStmt>(S) || isa<NullStmt>(S))
    return Lexer::getLocForEndOfToken(End, 0, SM, LangOpts);
  const SourceLocation AfterSemi =
      Lexer::findLocationAfterToken(End, tok::semi, SM, LangOpts, false);
  if (AfterSemi.isValid())
    return AfterSemi;
  return Lexer::getLocForEndOfToken(End, 0, SM, LangOpts);
}

SourceLocation SourceText::afterPreviousToken(SourceLocation Loc) const {
  const auto [FID, Offset] = SM.getDecomposedLoc(SM.getFileLoc(Loc));
  const StringRef Buffer = SM.getBufferData(FID);
  size_t Pos = Offset;
  while (Pos > 0 && isspace(static_cast<unsigned char>(Buffer[Pos - 1])))
    --Pos;
  return Loc.getLocWithOffset(static_cast<int>(Pos) - static_cast<int>(Offset));
}

SourceLocation SourceText::afterTrailingComment(SourceLocation Loc) const {
  const auto [FID, Offset] = SM.getDecomposedLoc(SM.getFileLoc(Loc));
  const StringRef Buffer = SM.getBufferData(FID);
  size_t Pos = Offset;
  while (Pos < Buffer.size() && (Buffer[Pos] == ' ' || Buffer[Pos] == '\t'))
    ++Pos;
  if (!Buffer.substr(Pos).startswith("//"))
    return Loc;
  const size_t LineEnd = Buffer.find('\n', Pos);
  return Loc.getLocWithOffset(
      static_cast<int>((LineEnd == StringRef::npos ? Buffer.size() : LineEnd) - Offset));
}

} // namespace accel::migrate
