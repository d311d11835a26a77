//===- MigrationContext.h - What a check can see and do in one translation unit -----*- C++ -*-===//
//
// Checks read the AST through this object and write through it: every edit names the check that
// made it, every location is checked to be in a file we may edit (the main file or a user header,
// never a system or LibTorch header, never inside a macro), and code that needs the Accelerator
// asks for it here, which records that the enclosing function must have one.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "AcceleratorReach.h"
#include "MigrateOptions.h"
#include "MigrationResult.h"
#include "ProgramFacts.h"
#include "SourceText.h"

#include "clang/AST/ASTContext.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Regex.h"

#include <map>
#include <set>
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

  /// The text around the code: ranges, indentation, where statements end.
  const SourceText &source() const { return Source; }
  /// Which functions and classes need the Accelerator, and where statements sit.
  AcceleratorReach &reach() { return Reach; }

  /// Inserts Line (without its newline) as a line of its own after statement S, indented like
  /// Indent. It goes at the start of the next line, so it survives S being removed.
  void insertLineAfter(llvm::StringRef Check, const clang::Stmt *S, llvm::StringRef Indent,
                       llvm::StringRef Line);

  /// Inserts Line as a line of its own before the line holding Loc, indented like it; when
  /// other code precedes Loc on its line, inserts it (and a space) at Loc instead.
  void insertLineBefore(llvm::StringRef Check, clang::SourceLocation Loc, llvm::StringRef Line);

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
  /// Removes a statement with its semicolon; the whole line when nothing else is on it. With
  /// Superseding, other transformations' edits inside it go with it.
  void removeStatement(llvm::StringRef Check, const clang::Stmt *S, bool Superseding = false);
  /// Counts one applied transformation, anchored at Loc (counted once however often it is seen).
  void applied(llvm::StringRef Check, clang::SourceLocation Anchor);
  /// Reports what could not be migrated; with --annotate also leaves a comment above the line.
  void warn(llvm::StringRef Check, clang::SourceLocation Loc, const llvm::Twine &Message);
  /// Reports what makes the whole migration unsafe: no file of the run is changed.
  void refuse(llvm::StringRef Check, clang::SourceLocation Loc, const llvm::Twine &Message);

  /// The name under which the Accelerator is reachable at S, recording that S's function needs
  /// it (see AcceleratorReach). Empty when it cannot be made reachable; a warning then says why.
  std::string accelerator(llvm::StringRef Check, const clang::Stmt *S);

  /// The #include directives of the file at Path, in order.
  const std::vector<IncludeDirective> &includesOf(const std::string &Path) const;
  void setIncludes(const IncludeIndex *Index) { Includes = Index; }

  /// Variables this migration reduces across processes after a loop (`v = accelerator.reduce(v)`,
  /// reduce-metrics'): the same on every process from there on, though the source does not say so
  /// yet (the divergent-collective check reads them as combined).
  void markReduced(const clang::VarDecl *Var) { Reduced.insert(Var->getCanonicalDecl()); }
  const std::set<const clang::Decl *> &reducedVariables() const { return Reduced; }

  /// Functions defined here that reach a collective (ProgramSummary::Collectives).
  void exportCollectives(std::map<std::string, std::string> Functions) {
    Collectives = std::move(Functions);
  }
  const std::map<std::string, std::string> &exportedCollectives() const { return Collectives; }

  /// Files this translation unit has edited so far.
  std::vector<std::string> editedFiles() const;
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
  SourceText Source;
  AcceleratorReach Reach;
  std::optional<llvm::Regex> HeaderFilter;
  std::string MainDirectory;
  std::string WorkingDirectory;                   // real path; empty when it is the root
  mutable std::map<unsigned, bool> EditableFiles; // FileID hash -> editable
  const IncludeIndex *Includes = nullptr;
  std::map<std::string, std::string> Collectives;
  std::set<const clang::Decl *> Reduced;
};

} // namespace accel::migrate
