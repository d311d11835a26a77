//===- MigrationVerifier.h - The migrated program must compile ----------------------*- C++ -*-===//
//
// A migration that does not compile is the second worst result accel-migrate can give (after
// one that compiles and trains wrong). Before anything is written, every input is parsed again
// with the migrated texts in place of the originals (the input and every header the run edits),
// with the same compile command; each error is traced back to the original line it stands at
// and the transformations whose edits made that place.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "EditSet.h"

#include "clang/Tooling/CompilationDatabase.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace accel::migrate {

/// One file of the run: its text before and after, and the edits between them.
struct MigratedText {
  std::string Original;
  std::string Migrated;
  const EditSet *Edits = nullptr;
};

/// An error the compiler found in the migrated program.
struct MigratedError {
  std::string File;              ///< real path; empty when the error has no location
  unsigned Line = 0, Column = 0; ///< in the migrated text
  std::string Message;
  /// The line of the original the error stands at, or the line the changed lines replace or go
  /// before (0 when the file is not one the run changed).
  unsigned OriginalLine = 0;
  /// Whether the error's line is one the migration wrote (rather than one of the program's).
  bool OnChangedLine = false;
  /// The transformations (accel-migrate-CHECK names) whose edits made the changed lines there.
  std::vector<std::string> Checks;
};

/// Where a line of a migrated text comes from: the original line (1-based) it is, or, for a
/// line the migration wrote, the original line its change replaces or goes before; and the
/// original's [begin, end) byte range of that change.
struct LineOrigin {
  unsigned OriginalLine = 0;
  bool Changed = false;
  unsigned Begin = 0, End = 0;
};
std::vector<LineOrigin> lineOrigins(llvm::StringRef Original, llvm::StringRef Migrated);

/// Parses each of Inputs (which compiled before) with every text of Files in place of the file
/// on disk; Args are appended to each compile command, and PchFor(Input) may name a precompiled
/// preamble to parse with (empty: none; an error with it is confirmed without it). Returns the
/// errors, each once.
std::vector<MigratedError> verifyMigration(
    const clang::tooling::CompilationDatabase &Database, const std::vector<std::string> &Inputs,
    const std::map<std::string, MigratedText> &Files, const std::vector<std::string> &Args,
    const std::function<std::string(const std::string &)> &PchFor);

} // namespace accel::migrate
