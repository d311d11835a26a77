//===- SourceText.h - Reading a file's text around AST nodes ------------------------*- C++ -*-===//
//
// What a check needs to know of the text around the code it edits: a range's source, a line's
// indentation, the file's indentation step and reference style, and where a statement ends. It
// reads; MigrationContext writes.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "clang/Basic/LangOptions.h"
#include "clang/Basic/SourceLocation.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace clang {
class SourceManager;
class Stmt;
} // namespace clang

namespace accel::migrate {

class SourceText {
public:
  SourceText(const clang::SourceManager &SM, const clang::LangOptions &LangOpts)
      : SM(SM), LangOpts(LangOpts) {}

  /// Where the line holding Offset starts in Text: just after the newline before Offset (the
  /// one at Offset - 1 included: an item at column 0 starts its own line), or 0.
  static size_t lineStart(llvm::StringRef Text, size_t Offset);

  /// Real path of the file containing Loc ("" for none).
  std::string pathOf(clang::SourceLocation Loc) const;
  /// Source text of a token range / of a character range.
  std::string text(clang::SourceRange TokenRange) const;
  std::string text(clang::CharSourceRange Range) const;
  /// The whitespace that starts Loc's line.
  std::string indentation(clang::SourceLocation Loc) const;
  /// One indentation step, guessed from the file (two spaces when it cannot tell).
  std::string indentStep(clang::SourceLocation Loc) const;
  /// `Type& Name`, `Type &Name` or `Type & Name`, as the file at Loc places its references.
  std::string referenceDeclaration(clang::SourceLocation Loc, llvm::StringRef Type,
                                   llvm::StringRef Name) const;
  /// The location just past a statement's terminating semicolon (or its closing brace).
  clang::SourceLocation afterStatement(const clang::Stmt *S) const;
  /// Loc moved back over the whitespace before it: just past the previous token.
  clang::SourceLocation afterPreviousToken(clang::SourceLocation Loc) const;
  /// Loc moved past the `// comment` that ends its line (to the line's end), when only spaces
  /// come between: code inserted there leaves an author's trailing comment on its own code.
  clang::SourceLocation afterTrailingComment(clang::SourceLocation Loc) const;

private:
  const clang::SourceManager &SM;
  const clang::LangOptions &LangOpts;
};

} // namespace accel::migrate
