//===- UnifiedDiff.h - Line diffs in `diff -u` format -------------------------------*- C++ -*-===//
#pragma once

#include "llvm/ADT/StringRef.h"

#include <string>

namespace accel::migrate {

/// A unified diff (3 lines of context) from Old to New, headed `--- OldLabel` / `+++ NewLabel`;
/// empty when the texts are equal. `git apply` and `patch -p1` accept it.
std::string unifiedDiff(llvm::StringRef OldLabel, llvm::StringRef NewLabel, llvm::StringRef Old,
                        llvm::StringRef New, unsigned Context = 3);

} // namespace accel::migrate
