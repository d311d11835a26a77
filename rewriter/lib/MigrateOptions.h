//===- MigrateOptions.h - What one accel-migrate run is asked to do -----------------*- C++ -*-===//
#pragma once

#include "ProgramSummary.h"

#include <optional>
#include <set>
#include <string>

namespace accel::migrate {

/// Options shared by every check in one run.
struct MigrateOptions {
  /// Transformations to run; empty means all of them.
  std::set<std::string> Only;
  /// Transformations not to run (wins over Only).
  std::set<std::string> Skip;
  /// Leave a `// accel-migrate: ...` comment at each warning.
  bool Annotate = false;
  /// Values passed to the inserted Accelerator; unset means the launcher's environment decides.
  std::optional<std::string> MixedPrecision;
  std::optional<unsigned> GradientAccumulationSteps;
  /// Headers whose path matches are edited; empty means "below the main file's directory, or
  /// below WorkingDirectory when the main file is".
  std::string HeaderFilter;
  /// The directory accel-migrate was run from (real path): parsing with a compilation database
  /// moves into each command's own directory, so it is noted before.
  std::string WorkingDirectory;
  /// The file is parsed with accel-migrate's cached preamble, which holds library headers only:
  /// what it declares is never walked, and the instantiations it asks for are not made. (A PCH
  /// of the user's own may hold their headers, and is read in full.)
  bool CachedPreamble = false;
  /// What the other files of the program said of themselves (ProgramSummary::relevantTo this
  /// one); empty on a file's first migration.
  ProgramSummary OtherFiles;

  /// True when the transformation called Name should run. The two support transformations
  /// (add-include, create-accelerator) run whenever another one needs them, unless skipped.
  bool enabled(const std::string &Name) const {
    if (Skip.count(Name))
      return false;
    if (Only.empty() || Only.count(Name))
      return true;
    return Name == "add-include" || Name == "create-accelerator";
  }
};

} // namespace accel::migrate
