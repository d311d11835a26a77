//===- EditSet.h - Non-overlapping text edits to one file ---------------------------*- C++ -*-===//
//
// The edits of every check (and of every translation unit that sees a shared header) land in one
// EditSet per file. Identical edits are kept once, so a template instantiated twice or a header
// seen by two files is edited once; an edit that overlaps a different one is refused.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "llvm/ADT/StringRef.h"

#include <string>
#include <utility>
#include <vector>

namespace accel::migrate {

struct Edit {
  unsigned Offset = 0;
  unsigned Length = 0;
  std::string Text;
  std::string Check;
  /// Whether the inserted text is formatted in the file's style afterwards. Whole new lines are;
  /// text replacing tokens inside a line the user wrote is not, so the line keeps its layout.
  bool Reformat = false;
};

class EditSet {
public:
  /// Adds E; returns false (and keeps the set unchanged) when E overlaps a different edit.
  bool add(const Edit &E);
  /// Merges E with a different edit it overlaps when one lies inside the other and the outer
  /// one's new text still holds the inner one's original text at the same place (the outer edit
  /// only drops what follows, as `x.to(device)` -> `x` does): the inner edit is then made inside
  /// the outer one's text. Code is the file's original text. Returns false when they cannot be.
  bool compose(const Edit &E, llvm::StringRef Code);
  /// Drops the edits that lie wholly inside [Offset, Offset + Length) (insertions at either
  /// end stay): a removal of the whole range makes them moot.
  void eraseInside(unsigned Offset, unsigned Length);
  bool empty() const { return Edits.empty(); }
  const std::vector<Edit> &edits() const { return Edits; }

  /// Applies the edits to Code. ChangedRanges receives the [offset, length) ranges in the
  /// result of inserted text to be formatted (deletions leave no range); RewrittenRanges those
  /// of the other new text (replacements and inline insertions), formatted only where they make
  /// a line too long.
  std::string apply(llvm::StringRef Code,
                    std::vector<std::pair<unsigned, unsigned>> *ChangedRanges = nullptr,
                    std::vector<std::pair<unsigned, unsigned>> *RewrittenRanges = nullptr) const;

private:
  std::vector<Edit> Edits; // in order of arrival
};

} // namespace accel::migrate
