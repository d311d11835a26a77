//===- SourceStyle.h - Writing in the style of the file being migrated --------------*- C++ -*-===//
//
// A migration diff is read by a reviewer: it must show the migration and nothing else. Inserted
// text is formatted in the file's own style (its .clang-format, or what the file itself shows:
// indentation width, tabs, where `&` and `*` go, how long its lines run), and no line outside an
// edit changes, not even in its whitespace.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "clang/Format/Format.h"
#include "llvm/ADT/StringRef.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include <string>

#include <utility>
#include <vector>

namespace accel::migrate {

/// Calls Use with the style of the file at Path with contents Code: the nearest .clang-format
/// (or _clang-format) above it when there is one, else one derived from Code. The style is lent,
/// not returned: clang 14's parsed FormatStyle can hold fields left unset, and copying it reads
/// them (undefined behaviour that UBSan reports).
void withStyleOf(llvm::StringRef Path, llvm::StringRef Code,
                 llvm::function_ref<void(clang::format::FormatStyle &)> Use);

/// The style Code shows: indentation step and tabs, pointer alignment and column limit, on top
/// of LLVM's.
clang::format::FormatStyle derivedStyle(llvm::StringRef Code);

/// Formats the given [offset, length) ranges of Migrated (the inserted text) in the style of
/// Path (its .clang-format, or else the style Original shows), and the lines holding a
/// Rewritten range that are now longer than the style's column limit.
std::string formatInserted(llvm::StringRef Path, llvm::StringRef Original, llvm::StringRef Migrated,
                           const std::vector<std::pair<unsigned, unsigned>> &Ranges,
                           const std::vector<std::pair<unsigned, unsigned>> &Rewritten = {});

/// Migrated with every line that differs from Original only in whitespace put back as it was
/// (a changed block that is the same text re-wrapped is put back whole).
std::string restoreWhitespaceOnlyChanges(llvm::StringRef Original, llvm::StringRef Migrated);

/// Migrated with trailing blanks taken off every line that is not a line of Original: new text
/// never ends a line in whitespace, whatever joined it (the user's own lines keep theirs).
std::string trimNewTrailingWhitespace(llvm::StringRef Original, llvm::StringRef Migrated);

/// Migrated with Original's line endings: where most of Original's lines end in "\r\n" (a file
/// written on Windows), every line of Migrated does, the new ones included; else Migrated as is.
std::string matchLineEndings(llvm::StringRef Original, llvm::StringRef Migrated);

/// The number of lines of Migrated that differ from a removed line of Original only in
/// whitespace: what a reviewer would see as noise. 0 after restoreWhitespaceOnlyChanges.
unsigned countWhitespaceOnlyChanges(llvm::StringRef Original, llvm::StringRef Migrated);

} // namespace accel::migrate
