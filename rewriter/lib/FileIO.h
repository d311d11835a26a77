//===- FileIO.h - Reading inputs and writing results without losing anything --------*- C++ -*-===//
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace accel::migrate {

/// Path made absolute, without `.` and `..`, and with its links resolved where it exists: the
/// one name the run knows a file by.
std::string absolutePath(llvm::StringRef Path);

/// The whole file, or an error naming it and the reason.
llvm::Expected<std::string> readFile(llvm::StringRef Path);

/// Writes Content to Path atomically: a temporary sibling, flushed to disk, given Path's
/// permissions, then renamed over Path. On any failure Path is untouched and the temporary gone.
llvm::Error writeFileAtomically(llvm::StringRef Path, llvm::StringRef Content);

/// An error when Path (or, for a new file, its directory) cannot be written.
llvm::Error checkWritable(llvm::StringRef Path);

} // namespace accel::migrate
