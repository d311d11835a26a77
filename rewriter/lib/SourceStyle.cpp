//===- SourceStyle.cpp ----------------------------------------------------------------------===//
#include "SourceStyle.h"

#include "LineDiff.h"
#include "SourceText.h"

#include "clang/Tooling/Core/Replacement.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <map>
#include <set>

using namespace clang;

namespace accel::migrate {

namespace {

bool hasStyleFile(llvm::StringRef Path) {
  llvm::SmallString<256> Dir(Path);
  llvm::sys::fs::make_absolute(Dir);
  for (llvm::StringRef D = llvm::sys::path::parent_path(Dir); !D.empty();
       D = llvm::sys::path::parent_path(D)) {
    for (const char *Name : {".clang-format", "_clang-format"}) {
      llvm::SmallString<256> Candidate(D);
      llvm::sys::path::append(Candidate, Name);
      if (llvm::sys::fs::exists(Candidate))
        return true;
    }
  }
  return false;
}

// Everything but spaces, tabs and line ends: two lines with the same tokens compare equal.
std::string withoutWhitespace(llvm::StringRef Text) {
  std::string Out;
  for (char C : Text)
    if (C != ' ' && C != '\t' && C != '\n' && C != '\r')
      Out += C;
  return Out;
}

// A changed block of a line diff: lines [RemoveBegin, RemoveEnd) of the original became lines
// [AddBegin, AddEnd) of the migrated text.
struct ChangedBlock {
  size_t RemoveBegin, RemoveEnd, AddBegin, AddEnd;
};

std::vector<ChangedBlock> changedBlocks(const std::vector<LineOp> &Ops) {
  std::vector<ChangedBlock> Blocks;
  size_t A = 0, B = 0;
  for (size_t K = 0; K < Ops.size();) {
    if (Ops[K] == LineOp::Keep) {
      ++A, ++B, ++K;
      continue;
    }
    ChangedBlock Block{A, A, B, B};
    for (; K < Ops.size() && Ops[K] != LineOp::Keep; ++K)
      Ops[K] == LineOp::Remove ? ++A : ++B;
    Block.RemoveEnd = A;
    Block.AddEnd = B;
    Blocks.push_back(Block);
  }
  return Blocks;
}

// For each added line of a block, the removed line it equals but for whitespace (a longest
// common subsequence, so the order is kept), or -1.
std::vector<long> whitespaceMatches(const std::vector<std::string> &Removed,
                                    const std::vector<std::string> &Added) {
  const size_t N = Removed.size(), M = Added.size();
  std::vector<std::vector<unsigned>> L(N + 1, std::vector<unsigned>(M + 1, 0));
  for (size_t I = N; I-- > 0;)
    for (size_t J = M; J-- > 0;)
      L[I][J] = !Removed[I].empty() && Removed[I] == Added[J] ? L[I + 1][J + 1] + 1
                                                              : std::max(L[I + 1][J], L[I][J + 1]);
  std::vector<long> Match(M, -1);
  for (size_t I = 0, J = 0; I < N && J < M;) {
    if (!Removed[I].empty() && Removed[I] == Added[J]) {
      Match[J] = static_cast<long>(I);
      ++I, ++J;
    } else if (L[I + 1][J] >= L[I][J + 1]) {
      ++I;
    } else {
      ++J;
    }
  }
  return Match;
}

unsigned mostCommon(const std::map<unsigned, unsigned> &Counts) {
  return std::max_element(Counts.begin(), Counts.end(),
                          [](const auto &A, const auto &B) { return A.second < B.second; })
      ->first;
}

// Whether a line indented to Column lines up with what the previous line has there (an
// argument after its open parenthesis, a `<<` under a `<<`): alignment, which says nothing of
// the continuation indentation.
bool alignsWith(llvm::StringRef Previous, unsigned Column) {
  if (Column == 0 || Column >= Previous.size() || Previous[Column] == ' ' ||
      Previous[Column] == '\t')
    return false;
  const char Before = Previous[Column - 1];
  return Before == ' ' || Before == '(' || Before == '{' || Before == '[' || Before == '<';
}

} // namespace

/// How a file's declarations place `&` and `*`: `auto& x` (left), `auto &x` (right), `auto & x`
/// (middle), counted line by line.
struct PointerSpacing {
  unsigned Left = 0, Right = 0, Middle = 0;

  /// The declarators of one line's text (without its indentation).
  void count(llvm::StringRef Body) {
    for (size_t Pos = 0; (Pos = Body.find_first_of("&*", Pos)) != llvm::StringRef::npos; ++Pos) {
      if (Pos == 0 || Pos + 1 >= Body.size() || Body[Pos + 1] == '&' || Body[Pos + 1] == '=' ||
          Body[Pos - 1] == '&' || Body[Pos - 1] == '(')
        continue;
      const bool SpaceBefore = Body[Pos - 1] == ' ', SpaceAfter = Body[Pos + 1] == ' ';
      const char Before = SpaceBefore ? (Pos >= 2 ? Body[Pos - 2] : ' ') : Body[Pos - 1];
      const char After = SpaceAfter ? (Pos + 2 < Body.size() ? Body[Pos + 2] : ' ') : Body[Pos + 1];
      // A type name (or > of a template) before, an identifier after: a declarator.
      if (!(std::isalnum(static_cast<unsigned char>(Before)) || Before == '>' || Before == '_') ||
          !(std::isalpha(static_cast<unsigned char>(After)) || After == '_'))
        continue;
      if (!SpaceBefore && SpaceAfter)
        ++Left;
      else if (SpaceBefore && !SpaceAfter)
        ++Right;
      else if (SpaceBefore && SpaceAfter)
        ++Middle; // also `a * b` and `a & b`; counts only if nothing else is seen
    }
  }
};

format::FormatStyle derivedStyle(llvm::StringRef Code) {
  format::FormatStyle Style = format::getLLVMStyle();
  Style.InheritsParentConfig = false; // clang 14 leaves it unset, and copying an unset bool is UB
  std::map<unsigned, unsigned> StepCounts; // indentation increase between lines -> count
  unsigned TabLines = 0, SpaceLines = 0;
  std::vector<unsigned> Widths;
  PointerSpacing Pointers;
  std::map<unsigned, unsigned> ContinuationCounts; // the same after a line that goes on
  unsigned PreviousIndent = 0;
  llvm::StringRef PreviousLine;
  char PreviousEnd = ';';
  bool PreviousOpensBody = false;
  for (llvm::StringRef Line : splitLines(Code)) {
    Line = Line.rtrim("\r\n");
    Widths.push_back(static_cast<unsigned>(Line.size()));
    const llvm::StringRef Body = Line.ltrim(" \t");
    if (Body.empty() || Body.startswith("//") || Body.startswith("*") || Body.startswith("#"))
      continue;
    const unsigned Indent = static_cast<unsigned>(Line.size() - Body.size());
    if (Indent > 0)
      (Line[0] == '\t' ? TabLines : SpaceLines) += 1;
    // A block's indentation shows after a line that opens one; after a line that stops
    // mid-statement (`=`, `(`, `,`), the continuation indentation shows instead.
    if (Indent > PreviousIndent && Line[0] != '\t') {
      if (PreviousEnd == '{' || PreviousOpensBody)
        ++StepCounts[Indent - PreviousIndent];
      else if (PreviousEnd != ';' && PreviousEnd != '}' && !alignsWith(PreviousLine, Indent))
        ++ContinuationCounts[Indent - PreviousIndent];
    }
    PreviousIndent = Indent;
    PreviousLine = Line;
    const llvm::StringRef Statement = Body.split("//").first.rtrim();
    PreviousEnd = Statement.empty() ? ';' : Statement.back();
    // `if (...)`, `for (...)`, `else` with an unbraced body on the next line.
    PreviousOpensBody =
        Statement == "else" ||
        (PreviousEnd == ')' && (Statement.startswith("if ") || Statement.startswith("if(") ||
                                Statement.startswith("for ") || Statement.startswith("for(") ||
                                Statement.startswith("while ") || Statement.startswith("while(") ||
                                Statement.startswith("else if")));
    Pointers.count(Body);
  }
  if (TabLines > SpaceLines) {
    Style.UseTab = format::FormatStyle::UT_Always;
    Style.IndentWidth = Style.TabWidth = 4;
  } else if (!StepCounts.empty()) {
    // The most common increase of indentation into a block is the step.
    Style.IndentWidth = std::clamp(mostCommon(StepCounts), 1u, 8u);
  }
  Style.ContinuationIndentWidth = Style.IndentWidth < 4 ? 4 : Style.IndentWidth;
  if (!ContinuationCounts.empty() && TabLines <= SpaceLines)
    Style.ContinuationIndentWidth = std::clamp(mostCommon(ContinuationCounts), 1u, 16u);
  Style.AccessModifierOffset = -static_cast<int>(Style.IndentWidth) / 2;
  if (Pointers.Left > Pointers.Right)
    Style.PointerAlignment = format::FormatStyle::PAS_Left;
  else if (Pointers.Right > 0 || Pointers.Middle == 0)
    Style.PointerAlignment = format::FormatStyle::PAS_Right;
  else
    Style.PointerAlignment = format::FormatStyle::PAS_Middle;
  Style.DerivePointerAlignment = false;
  // How far the author usually lets lines run (never less than 80): the longest line, once the
  // few longest of a file of some size are left out (one stray long line, a URL, a table row,
  // does not let every edit run as long).
  std::sort(Widths.begin(), Widths.end(), std::greater<unsigned>());
  const size_t Outliers = Widths.size() >= 20 ? 1 + Widths.size() / 50 : 0;
  const unsigned Usual = Widths.size() > Outliers ? Widths[Outliers] : 0;
  Style.ColumnLimit = std::max(80u, Usual);
  return Style;
}

void withStyleOf(llvm::StringRef Path, llvm::StringRef Code,
                 llvm::function_ref<void(format::FormatStyle &)> Use) {
  if (hasStyleFile(Path)) {
    auto Style = format::getStyle("file", Path, "LLVM", Code);
    if (Style) {
      Use(*Style);
      return;
    }
    llvm::consumeError(Style.takeError()); // a broken .clang-format: what the file shows
  }
  format::FormatStyle Derived = derivedStyle(Code);
  Use(Derived);
}

namespace {

std::string formatRanges(const format::FormatStyle &Style, llvm::StringRef Path,
                         llvm::StringRef Migrated, const std::vector<tooling::Range> &Ranges) {
  // clang-format also touches the lines around a range (the statement before an inserted line,
  // the rest of a block whose braces it re-indents). Only its changes to whitespace that lies
  // inside an inserted range, or leads into one, are kept: the author's lines stay as written.
  tooling::Replacements Fixes;
  for (const tooling::Replacement &Fix : format::reformat(Style, Migrated, Ranges, Path)) {
    const unsigned Begin = Fix.getOffset(), End = Begin + Fix.getLength();
    const bool Inside = llvm::any_of(Ranges, [&](const tooling::Range &R) {
      return Begin < R.getOffset() + R.getLength() && End > R.getOffset();
    });
    if (Inside)
      llvm::cantFail(Fixes.add(Fix));
  }
  auto Formatted = tooling::applyAllReplacements(Migrated, Fixes);
  if (!Formatted) {
    llvm::consumeError(Formatted.takeError());
    return Migrated.str();
  }
  return *Formatted;
}

} // namespace

std::string formatInserted(llvm::StringRef Path, llvm::StringRef Original, llvm::StringRef Migrated,
                           const std::vector<std::pair<unsigned, unsigned>> &Changed,
                           const std::vector<std::pair<unsigned, unsigned>> &Rewritten) {
  if (Changed.empty() && Rewritten.empty())
    return Migrated.str();
  std::string Result = Migrated.str();
  // The style is the original's: the migration's own long lines do not raise the column limit.
  withStyleOf(Path, Original, [&](format::FormatStyle &Style) {
    Style.SortIncludes = format::FormatStyle::SI_Never; // the include goes next to torch's
    std::vector<tooling::Range> Ranges;
    for (const auto &[Offset, Length] : Changed)
      Ranges.emplace_back(Offset, Length);
    // A rewritten line that no longer fits is wrapped: from its first non-blank character (its
    // indentation stays) to its end. Lines of the same edit that fit are left alone.
    auto columns = [&](size_t Begin, size_t End) {
      unsigned Columns = 0;
      for (size_t I = Begin; I < End; ++I)
        Columns =
            Migrated[I] == '\t' ? Columns + Style.TabWidth - Columns % Style.TabWidth : Columns + 1;
      return Columns;
    };
    for (const auto &[Offset, Length] :
         Style.ColumnLimit == 0 ? decltype(Rewritten){} : Rewritten) {
      for (size_t LineBegin = SourceText::lineStart(Migrated, Offset);
           LineBegin <= Offset + Length && LineBegin < Migrated.size();) {
        size_t LineEnd = Migrated.find('\n', LineBegin);
        if (LineEnd == llvm::StringRef::npos)
          LineEnd = Migrated.size();
        const size_t Text = Migrated.find_first_not_of(" \t", LineBegin);
        if (columns(LineBegin, LineEnd) > Style.ColumnLimit && Text < LineEnd)
          Ranges.emplace_back(static_cast<unsigned>(Text), static_cast<unsigned>(LineEnd - Text));
        LineBegin = LineEnd + 1;
      }
    }
    if (!Ranges.empty())
      Result = formatRanges(Style, Path, Migrated, Ranges);
  });
  return Result;
}

namespace {

// How to put back what formatting changed only in whitespace: for each added line of Migrated,
// whether it goes (Dropped), and the original lines that go before each added line index.
struct RestorePlan {
  std::vector<bool> Dropped;
  std::map<size_t, std::vector<llvm::StringRef>> InsertBefore;
  unsigned NoiseLines = 0; // added lines that differed from original ones in whitespace only
};

RestorePlan planRestore(const std::vector<llvm::StringRef> &A,
                        const std::vector<llvm::StringRef> &B) {
  RestorePlan Plan;
  Plan.Dropped.assign(B.size(), false);
  auto restoreRange = [&](size_t RemoveBegin, size_t RemoveEnd, size_t AddBegin, size_t AddEnd) {
    if (RemoveBegin == RemoveEnd || AddBegin == AddEnd)
      return;
    std::string Removed, Added;
    for (size_t I = RemoveBegin; I < RemoveEnd; ++I)
      Removed += withoutWhitespace(A[I]);
    for (size_t J = AddBegin; J < AddEnd; ++J)
      Added += withoutWhitespace(B[J]);
    if (Removed.empty() || Removed != Added)
      return;
    // The same text re-wrapped or re-indented: the original lines, as they were.
    for (size_t J = AddBegin; J < AddEnd; ++J)
      Plan.Dropped[J] = true;
    Plan.NoiseLines += static_cast<unsigned>(AddEnd - AddBegin);
    auto &Lines = Plan.InsertBefore[AddBegin];
    Lines.insert(Lines.end(), A.begin() + RemoveBegin, A.begin() + RemoveEnd);
  };
  for (const ChangedBlock &Block : changedBlocks(diffLines(A, B))) {
    std::vector<std::string> Removed, Added;
    for (size_t I = Block.RemoveBegin; I < Block.RemoveEnd; ++I)
      Removed.push_back(withoutWhitespace(A[I]));
    for (size_t J = Block.AddBegin; J < Block.AddEnd; ++J)
      Added.push_back(withoutWhitespace(B[J]));
    // Lines equal but for whitespace, in order; the stretches between them may be re-wrapped.
    const std::vector<long> Match = whitespaceMatches(Removed, Added);
    size_t PrevRemove = Block.RemoveBegin, PrevAdd = Block.AddBegin;
    for (size_t J = 0; J <= Match.size(); ++J) {
      if (J < Match.size() && Match[J] < 0)
        continue;
      const size_t Remove =
          J < Match.size() ? Block.RemoveBegin + static_cast<size_t>(Match[J]) : Block.RemoveEnd;
      const size_t Add = Block.AddBegin + J;
      restoreRange(PrevRemove, Remove, PrevAdd, Add);
      if (J == Match.size())
        break;
      Plan.Dropped[Add] = true;
      Plan.InsertBefore[Add].push_back(A[Remove]);
      ++Plan.NoiseLines;
      PrevRemove = Remove + 1;
      PrevAdd = Add + 1;
    }
  }
  return Plan;
}

} // namespace

std::string restoreWhitespaceOnlyChanges(llvm::StringRef Original, llvm::StringRef Migrated) {
  const auto A = splitLines(Original), B = splitLines(Migrated);
  const RestorePlan Plan = planRestore(A, B);
  std::string Result;
  for (size_t J = 0; J <= B.size(); ++J) {
    if (auto It = Plan.InsertBefore.find(J); It != Plan.InsertBefore.end())
      for (llvm::StringRef Line : It->second)
        Result += Line.str();
    if (J < B.size() && !Plan.Dropped[J])
      Result += B[J].str();
  }
  return Result;
}

std::string trimNewTrailingWhitespace(llvm::StringRef Original, llvm::StringRef Migrated) {
  const std::vector<llvm::StringRef> Lines = splitLines(Original);
  const std::set<llvm::StringRef> Known(Lines.begin(), Lines.end());
  std::string Result;
  for (llvm::StringRef Line : splitLines(Migrated)) {
    const bool NewLine = Line.endswith("\n");
    llvm::StringRef Text = Line.drop_back(NewLine ? 1 : 0);
    if (Text.endswith("\r"))
      Text = Text.drop_back();
    if (!Known.count(Line) && Text.rtrim(" \t").size() != Text.size()) {
      Result += Text.rtrim(" \t").str();
      Result += Line.drop_front(Text.size()).str(); // the line's end, \r\n or \n
      continue;
    }
    Result += Line.str();
  }
  return Result;
}

unsigned countWhitespaceOnlyChanges(llvm::StringRef Original, llvm::StringRef Migrated) {
  const auto A = splitLines(Original), B = splitLines(Migrated);
  return planRestore(A, B).NoiseLines;
}

std::string matchLineEndings(llvm::StringRef Original, llvm::StringRef Migrated) {
  const size_t Lines = Original.count('\n'), Windows = Original.count("\r\n");
  if (Windows == 0 || Windows * 2 < Lines)
    return Migrated.str();
  std::string Out;
  Out.reserve(Migrated.size() + Migrated.count('\n') - Migrated.count("\r\n"));
  for (size_t I = 0; I < Migrated.size(); ++I) {
    if (Migrated[I] == '\n' && (I == 0 || Migrated[I - 1] != '\r'))
      Out += '\r';
    Out += Migrated[I];
  }
  return Out;
}

} // namespace accel::migrate
