//===- MigrationAction.h - The frontend action that runs the checks -----------------*- C++ -*-===//
#pragma once

#include "MigrateOptions.h"
#include "MigrationResult.h"

#include "clang/Tooling/Tooling.h"

#include <memory>

namespace accel::migrate {

/// Creates actions that parse a file, run every enabled check on it and record the outcome in
/// Result (Result.Failed when the file does not compile: nothing is edited then).
std::unique_ptr<clang::tooling::FrontendActionFactory>
newMigrationActionFactory(const MigrateOptions &Options, TranslationUnitResult &Result);

/// Syntax and semantics only, for the verification of a migrated program (MigrationVerifier):
/// with a cached preamble, the bodies of the preamble's templates are not instantiated (LibTorch's
/// and accel's code, which the migration's parse skips too); the program's own code is checked
/// whole.
std::unique_ptr<clang::tooling::FrontendActionFactory> newVerificationActionFactory();

} // namespace accel::migrate
