//===- MigrationContext.h - What a check can see and do in one translation unit -----*- C++ -*-===//
//
// Checks read the AST through this object and write through it: every edit names the check that
// made it, every location is checked to be in a file we may edit (the main file or a user header,
// never a system or LibTorch header, never inside a macro), and code that needs the Accelerator
// asks for it here, which records that the enclosing function must have one.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "MigrateOptions.h"
#include "MigrationResult.h"
#include "ProgramFacts.h"

#include "clang/AST/ASTContext.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Regex.h"

#include <map>
#include <string>

namespace accel::migrate {

/// An #include seen while parsing: what it names, and where its line ends.
struct IncludeDirective {
  std::string Spelled;
  clang::SourceLocation LineEnd;
};
using IncludeIndex = std::map<std::string, std::vector<IncludeDirective>>; // by file path

class MigrationContext {
public:
  MigrationContext(clang::ASTContext &Ctx, const MigrateOptions &Options,
                   TranslationUnitResult &Result);

  clang::ASTContext &ast() { return Ctx; }
  clang::SourceManager &sourceManager() { return Ctx.getSourceManager(); }
  const MigrateOptions &options() const { return Options; }
  ProgramFacts &facts() { return Facts; }

  /// A file location (not from a macro) in the main file or in a user header.
  bool isEditable(clang::SourceLocation Loc) const;
  /// True when R can be edited. When R comes from a macro expanded in an editable file, warns
  /// (tagged with Check) that the code must be migrated by hand.
  bool canEdit(llvm::StringRef Check, clang::SourceRange R);

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

  /// Inserts Line (without its newline) as a line of its own after statement S, indented like
  /// Indent. It goes at the start of the next line, so it survives S being removed.
  void insertLineAfter(llvm::StringRef Check, const clang::Stmt *S, llvm::StringRef Indent,
                       llvm::StringRef Line);

  /// Inserts Line as a line of its own before the line holding Loc, indented like it; when
  /// other code precedes Loc on its line, inserts it (and a space) at Loc instead.
  void insertLineBefore(llvm::StringRef Check, clang::SourceLocation Loc, llvm::StringRef Line);
  /// Loc moved back over the whitespace before it: just past the previous token.
  clang::SourceLocation afterPreviousToken(clang::SourceLocation Loc) const;

  void replace(llvm::StringRef Check, clang::SourceRange TokenRange, llvm::StringRef NewText);
  void replace(llvm::StringRef Check, clang::CharSourceRange Range, llvm::StringRef NewText);
  /// Replaces Range and formats the new text in the file's style (new text that re-emits the
  /// author's lines inside a longer expression, whose alignment would otherwise be off).
  void replaceFormatted(llvm::StringRef Check, clang::CharSourceRange Range,
                        llvm::StringRef NewText);
  /// Inserts NewText at Loc; text that holds whole new lines is formatted in the file's style.
  void insert(llvm::StringRef Check, clang::SourceLocation Loc, llvm::StringRef NewText);
  /// Inserts NewText at Loc exactly as given (a guard that must stay on its statement's line).
  void insertVerbatim(llvm::StringRef Check, clang::SourceLocation Loc, llvm::StringRef NewText);
  /// Removes a statement with its semicolon; the whole line when nothing else is on it.
  void removeStatement(llvm::StringRef Check, const clang::Stmt *S);
  /// Counts one applied transformation, anchored at Loc (counted once however often it is seen).
  void applied(llvm::StringRef Check, clang::SourceLocation Anchor);
  /// Reports what could not be migrated; with --annotate also leaves a comment above the line.
  void warn(llvm::StringRef Check, clang::SourceLocation Loc, const llvm::Twine &Message);

  /// The function (or lambda call operator) whose body contains S, as written (not an
  /// instantiation).
  const clang::FunctionDecl *enclosingFunction(const clang::Stmt *S);
  /// The parent statements of S, nearest first.
  const clang::Stmt *parentStmt(const clang::Stmt *S);

  /// The name under which the Accelerator is reachable at S, recording that S's function needs
  /// it (created in the host function, passed as a parameter to the others). Empty when it
  /// cannot be made reachable (a lambda capturing by copy); a warning then says why.
  std::string accelerator(llvm::StringRef Check, const clang::Stmt *S);
  /// Functions (other than the host) that need an Accelerator parameter, in discovery order.
  const llvm::SetVector<const clang::FunctionDecl *> &functionsNeedingAccelerator() const {
    return NeedAccelerator;
  }
  bool hostNeedsAccelerator() const { return HostNeedsAccelerator; }
  /// Notes that Fn (not the host) needs the Accelerator; returns the name to use in it. A
  /// method reaches it through a member of its class, so its class is noted too.
  std::string requireAccelerator(const clang::FunctionDecl *Fn);
  /// Notes that a class must hold an accel::Accelerator& member; returns the member's name.
  std::string requireMemberAccelerator(const clang::CXXRecordDecl *Class);
  /// Classes that need an Accelerator member, in discovery order.
  const llvm::SetVector<const clang::CXXRecordDecl *> &classesNeedingAccelerator() const {
    return NeedMemberAccelerator;
  }

  /// The #include directives of the file at Path, in order.
  const std::vector<IncludeDirective> &includesOf(const std::string &Path) const;
  void setIncludes(const IncludeIndex *Index) { Includes = Index; }

  /// Files this translation unit has edited so far.
  std::vector<std::string> editedFiles() const;
  /// Real path of the file containing Loc ("" for none).
  std::string pathOf(clang::SourceLocation Loc) const;
  /// Edits recorded for Path.
  const FileResult *resultFor(const std::string &Path) const;

private:
  bool isEditableFile(clang::FileID FID) const;
  void addEdit(llvm::StringRef Check, clang::CharSourceRange Range, llvm::StringRef NewText,
               bool Reformat = false);

  clang::ASTContext &Ctx;
  const MigrateOptions &Options;
  TranslationUnitResult &Result;
  ProgramFacts Facts;
  std::optional<llvm::Regex> HeaderFilter;
  std::string MainDirectory;
  std::string WorkingDirectory;                   // real path; empty when it is the root
  mutable std::map<unsigned, bool> EditableFiles; // FileID hash -> editable
  llvm::SetVector<const clang::FunctionDecl *> NeedAccelerator;
  llvm::SetVector<const clang::CXXRecordDecl *> NeedMemberAccelerator;
  bool HostNeedsAccelerator = false;
  const IncludeIndex *Includes = nullptr;
};

} // namespace accel::migrate
