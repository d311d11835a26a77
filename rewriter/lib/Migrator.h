//===- Migrator.h - One accel-migrate run over a set of files -----------------------*- C++ -*-===//
#pragma once

#include "MigrateOptions.h"
#include "PreambleCache.h"

#include "clang/Tooling/CompilationDatabase.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace accel::migrate {

/// Exit codes of accel-migrate (also documented in --help and the README).
enum ExitCode : int {
  ExitSuccess = 0,     ///< migrated (or nothing to do)
  ExitWouldChange = 1, ///< --check: some file would be changed
  ExitParseError = 2,  ///< some input does not compile (it was left untouched), the program
                       ///< cannot be migrated safely, or its migration would not compile (no
                       ///< file was changed)
  ExitFileError = 3,   ///< an input is missing or unreadable, or a result cannot be written
  ExitUsageError = 4,  ///< bad command line
};

enum class OutputMode { InPlace, Diff, Check, OutputFile };

struct MigratorOptions {
  MigrateOptions Checks;
  OutputMode Mode = OutputMode::InPlace;
  std::string OutputFile;             ///< for OutputMode::OutputFile
  unsigned Jobs = 1;                  ///< files parsed in parallel
  std::string StatsJson;              ///< write per-file statistics here when set
  std::vector<std::string> ExtraArgs; ///< appended to every compile command
  bool Quiet = false;                 ///< no summary
  bool NoCache = false;               ///< parse every header again, as without a cache
  std::string CacheDir;               ///< the preamble cache; empty: PreambleCache's default
  uint64_t CacheMaxBytes = PreambleCache::DefaultMaxBytes; ///< 0: no bound
  /// The compile database (-p) lists the program's files: when the given files do not define
  /// main, the database's files that call what they change are migrated with them.
  bool ProgramFromDatabase = false;
  /// For tests (--testing-garble-check): every edit of this transformation gets a stray token,
  /// as a faulty check would write it; the verification must catch it and write nothing.
  std::string TestingGarbleCheck;
  /// For tests (--testing-no-verify): the migration is not parsed again. cache_equivalence.sh's
  /// runs without the cache use it (a whole parse of LibTorch's headers, 12 s a file here); its
  /// runs with the cache, and every other test's, are verified.
  bool TestingNoVerify = false;
  /// Write the files that parse when others do not (each left out is named); without it a
  /// program any of whose files does not compile is left wholly untouched.
  bool KeepGoing = false;
};

/// Writes "accel-migrate: error: MESSAGE" to Err, as every failure of the tool is reported, and
/// returns Code.
int reportError(llvm::raw_ostream &Err, int Code, const llvm::Twine &Message);

/// Parses every file, runs the checks, then writes, diffs or checks the results. Warnings and
/// the summary go to Err, diffs to Out. Returns an ExitCode.
int runMigration(const clang::tooling::CompilationDatabase &Database,
                 const std::vector<std::string> &Files, const MigratorOptions &Options,
                 llvm::raw_ostream &Out, llvm::raw_ostream &Err);

} // namespace accel::migrate
