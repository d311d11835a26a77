//===- UnifiedDiff.cpp ----------------------------------------------------------------------===//
#include "UnifiedDiff.h"

#include "LineDiff.h"

#include <algorithm>
#include <vector>

namespace accel::migrate {

namespace {

void appendLine(std::string &Out, char Prefix, llvm::StringRef Line) {
  Out += Prefix;
  Out += Line.str();
  if (!Line.endswith("\n"))
    Out += "\n\\ No newline at end of file\n";
}

} // namespace

std::string unifiedDiff(llvm::StringRef OldLabel, llvm::StringRef NewLabel, llvm::StringRef Old,
                        llvm::StringRef New, unsigned Context) {
  if (Old == New)
    return {};
  const auto A = splitLines(Old), B = splitLines(New);
  const std::vector<LineOp> Ops = diffLines(A, B);
  std::string Out = "--- " + OldLabel.str() + "\n+++ " + NewLabel.str() + "\n";
  // Group changes into hunks with Context lines around them.
  size_t I = 0;
  const size_t Count = Ops.size();
  // Position in A and B before each op.
  std::vector<size_t> PosA(Count + 1), PosB(Count + 1);
  for (size_t K = 0; K < Count; ++K) {
    PosA[K + 1] = PosA[K] + (Ops[K] != LineOp::Add);
    PosB[K + 1] = PosB[K] + (Ops[K] != LineOp::Remove);
  }
  while (I < Count) {
    while (I < Count && Ops[I] == LineOp::Keep)
      ++I;
    if (I == Count)
      break;
    size_t Start = I >= Context ? I - Context : 0;
    size_t End = I;
    // Extend while the next change is within 2*Context kept lines.
    while (true) {
      while (End < Count && Ops[End] != LineOp::Keep)
        ++End;
      size_t Next = End;
      while (Next < Count && Ops[Next] == LineOp::Keep)
        ++Next;
      if (Next < Count && Next - End <= 2 * Context) {
        End = Next;
        continue;
      }
      End = std::min(Count, End + Context);
      break;
    }
    const size_t LenA = PosA[End] - PosA[Start], LenB = PosB[End] - PosB[Start];
    Out += "@@ -" + std::to_string(PosA[Start] + (LenA ? 1 : 0)) + "," + std::to_string(LenA) +
           " +" + std::to_string(PosB[Start] + (LenB ? 1 : 0)) + "," + std::to_string(LenB) +
           " @@\n";
    for (size_t K = Start; K < End; ++K) {
      if (Ops[K] == LineOp::Keep)
        appendLine(Out, ' ', A[PosA[K]]);
      else if (Ops[K] == LineOp::Remove)
        appendLine(Out, '-', A[PosA[K]]);
      else
        appendLine(Out, '+', B[PosB[K]]);
    }
    I = End;
  }
  return Out;
}

} // namespace accel::migrate
