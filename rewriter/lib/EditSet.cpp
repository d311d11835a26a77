//===- EditSet.cpp --------------------------------------------------------------------------===//
#include "EditSet.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <optional>

namespace accel::migrate {

namespace {
bool sameEdit(const Edit &A, const Edit &B) {
  return A.Offset == B.Offset && A.Length == B.Length && A.Text == B.Text;
}
// Two edits conflict when their replaced ranges overlap, or an insertion falls strictly inside a
// replaced range. Insertions at the same offset are fine: they are applied in arrival order.
bool conflict(const Edit &A, const Edit &B) {
  const unsigned AEnd = A.Offset + A.Length, BEnd = B.Offset + B.Length;
  if (A.Length == 0 && B.Length == 0)
    return false;
  if (A.Length == 0)
    return A.Offset > B.Offset && A.Offset < BEnd;
  if (B.Length == 0)
    return B.Offset > A.Offset && B.Offset < AEnd;
  return A.Offset < BEnd && B.Offset < AEnd;
}

// A replacement by one check that lies wholly inside another replacement by the same check is
// already part of it: e.g. `torch::Device(torch::kCUDA, 0)` inside a device initializer that is
// replaced as a whole.
bool covers(const Edit &Outer, const Edit &Inner) {
  return Outer.Check == Inner.Check && Outer.Length > 0 && Inner.Length > 0 &&
         Outer.Offset <= Inner.Offset && Inner.Offset + Inner.Length <= Outer.Offset + Outer.Length;
}
} // namespace

bool EditSet::add(const Edit &E) {
  std::vector<size_t> Covered;
  for (size_t I = 0; I < Edits.size(); ++I) {
    const Edit &Existing = Edits[I];
    if (sameEdit(Existing, E) || covers(Existing, E))
      return true;
    if (covers(E, Existing)) {
      Covered.push_back(I);
      continue;
    }
    if (conflict(Existing, E))
      return false;
  }
  for (auto I = Covered.rbegin(); I != Covered.rend(); ++I)
    Edits.erase(Edits.begin() + static_cast<std::ptrdiff_t>(*I));
  Edits.push_back(E);
  return true;
}

void EditSet::eraseInside(unsigned Offset, unsigned Length) {
  const unsigned End = Offset + Length;
  llvm::erase_if(Edits, [&](const Edit &E) {
    if (E.Length == 0)
      return E.Offset > Offset && E.Offset < End;
    return E.Offset >= Offset && E.Offset + E.Length <= End;
  });
}

bool EditSet::compose(const Edit &E, llvm::StringRef Code) {
  auto inside = [](const Edit &Outer, const Edit &Inner) {
    return Outer.Length > 0 && Inner.Length > 0 && Outer.Offset <= Inner.Offset &&
           Inner.Offset + Inner.Length <= Outer.Offset + Outer.Length;
  };
  // The outer edit's text with the inner edit made in it, or nothing.
  auto merged = [&](const Edit &Outer, const Edit &Inner) -> std::optional<Edit> {
    if (Inner.Offset + Inner.Length > Code.size())
      return std::nullopt;
    const unsigned At = Inner.Offset - Outer.Offset;
    const llvm::StringRef Original = Code.substr(Outer.Offset, At + Inner.Length);
    if (!llvm::StringRef(Outer.Text).startswith(Original))
      return std::nullopt;
    Edit Result = Outer;
    Result.Text = Outer.Text.substr(0, At) + Inner.Text + Outer.Text.substr(At + Inner.Length);
    return Result;
  };
  for (size_t I = 0; I < Edits.size(); ++I) {
    const Edit Existing = Edits[I]; // a copy: it is erased below
    std::optional<Edit> Result;
    if (inside(Existing, E))
      Result = merged(Existing, E);
    else if (inside(E, Existing))
      Result = merged(E, Existing);
    if (!Result)
      continue;
    Edits.erase(Edits.begin() + static_cast<std::ptrdiff_t>(I));
    if (add(*Result))
      return true;
    Edits.insert(Edits.begin() + static_cast<std::ptrdiff_t>(I), Existing);
    return false;
  }
  return false;
}

std::string EditSet::apply(llvm::StringRef Code,
                           std::vector<std::pair<unsigned, unsigned>> *ChangedRanges,
                           std::vector<std::pair<unsigned, unsigned>> *RewrittenRanges) const {
  std::vector<const Edit *> Sorted;
  for (const Edit &E : Edits)
    Sorted.push_back(&E);
  // Stable: insertions at one offset keep their arrival order, and go before a replacement that
  // starts there.
  std::stable_sort(Sorted.begin(), Sorted.end(), [](const Edit *A, const Edit *B) {
    if (A->Offset != B->Offset)
      return A->Offset < B->Offset;
    return A->Length == 0 && B->Length != 0;
  });
  std::string Out;
  unsigned Pos = 0;
  for (const Edit *E : Sorted) {
    if (E->Offset < Pos || E->Offset + E->Length > Code.size())
      continue; // cannot happen for edits accepted by add(); kept defensive for stale offsets
    Out.append(Code.data() + Pos, E->Offset - Pos);
    // Without the trailing line end: formatting stops at the inserted lines, not the next one.
    const size_t Formatted = llvm::StringRef(E->Text).rtrim(" \t\n").size();
    if (ChangedRanges && E->Reformat && Formatted > 0)
      ChangedRanges->emplace_back(Out.size(), Formatted);
    else if (RewrittenRanges && !E->Reformat && !E->Text.empty())
      RewrittenRanges->emplace_back(Out.size(), E->Text.size());
    Out += E->Text;
    Pos = E->Offset + E->Length;
  }
  Out.append(Code.data() + Pos, Code.size() - Pos);
  return Out;
}

} // namespace accel::migrate
