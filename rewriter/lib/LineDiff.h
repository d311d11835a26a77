//===- LineDiff.h - Myers' O(ND) diff over lines ------------------------------------*- C++ -*-===//
//
// The one line diff of the tool: unifiedDiff prints it, and the whitespace pass of SourceStyle
// walks it to put back lines that formatting changed only in their spaces.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "llvm/ADT/StringRef.h"

#include <vector>

namespace accel::migrate {

/// The lines of Text, each with its newline (a missing last newline is a difference too).
std::vector<llvm::StringRef> splitLines(llvm::StringRef Text);

enum class LineOp { Keep, Remove, Add };

/// A shortest edit script from A to B: Keep and Remove consume a line of A, Keep and Add one
/// of B.
std::vector<LineOp> diffLines(const std::vector<llvm::StringRef> &A,
                              const std::vector<llvm::StringRef> &B);

} // namespace accel::migrate
