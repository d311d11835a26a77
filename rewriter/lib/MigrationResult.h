//===- MigrationResult.h - What checks produced, per file ---------------------------*- C++ -*-===//
#pragma once

#include "EditSet.h"
#include "ProgramSummary.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace accel::migrate {

/// A warning in clang's format: FILE:LINE:COL: warning: MESSAGE [accel-migrate-CHECK].
struct Warning {
  std::string File;
  unsigned Line = 0;
  unsigned Column = 0;
  std::string Message;
  std::string Check;
  bool operator<(const Warning &O) const {
    return std::tie(File, Line, Column, Check, Message) <
           std::tie(O.File, O.Line, O.Column, O.Check, O.Message);
  }
};

struct FileResult {
  EditSet Edits;
  /// (check, anchor offset) of each transformation applied; a set so that a template seen in
  /// several instantiations, or a header seen by several files, counts once.
  std::set<std::pair<std::string, unsigned>> Applied;
  std::set<Warning> Warnings;

  std::map<std::string, unsigned> appliedByCheck() const {
    std::map<std::string, unsigned> Counts;
    for (const auto &[Check, Offset] : Applied)
      ++Counts[Check];
    return Counts;
  }
};

/// Everything one translation unit produced, keyed by the real path of each file it edits.
struct TranslationUnitResult {
  std::map<std::string, FileResult> Files;
  /// The file did not compile: nothing of it is applied.
  bool Failed = false;
  /// What this file tells the other files of the program.
  ProgramSummary Summary;
  /// Why this file cannot be migrated safely (a migration that would compile but run wrong, or
  /// not compile at all): each a warning-shaped error. Then no file of the run is changed.
  std::set<Warning> Refusals;
};

} // namespace accel::migrate
