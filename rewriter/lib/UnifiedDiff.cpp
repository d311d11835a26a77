//===- UnifiedDiff.cpp - Myers' O(ND) diff over lines ---------------------------------------===//
#include "UnifiedDiff.h"

#include <algorithm>
#include <vector>

namespace accel::migrate {

namespace {

std::vector<llvm::StringRef> splitLines(llvm::StringRef Text) {
  std::vector<llvm::StringRef> Lines;
  while (!Text.empty()) {
    const size_t End = Text.find('\n');
    if (End == llvm::StringRef::npos) {
      Lines.push_back(Text);
      break;
    }
    Lines.push_back(Text.substr(0, End + 1)); // keeps the newline: a missing one is a change
    Text = Text.substr(End + 1);
  }
  return Lines;
}

enum class Op { Keep, Remove, Add };

// Myers' greedy algorithm with the V arrays kept for backtracking; D is small for our edits.
std::vector<Op> shortestEdit(const std::vector<llvm::StringRef> &A,
                             const std::vector<llvm::StringRef> &B) {
  const int N = static_cast<int>(A.size()), M = static_cast<int>(B.size());
  const int Max = N + M;
  std::vector<int> V(2 * Max + 2, 0);
  std::vector<std::vector<int>> Trace;
  for (int D = 0; D <= Max; ++D) {
    Trace.push_back(V);
    for (int K = -D; K <= D; K += 2) {
      int X = (K == -D || (K != D && V[Max + K - 1] < V[Max + K + 1])) ? V[Max + K + 1]
                                                                        : V[Max + K - 1] + 1;
      int Y = X - K;
      while (X < N && Y < M && A[X] == B[Y])
        ++X, ++Y;
      V[Max + K] = X;
      if (X >= N && Y >= M) {
        // Backtrack.
        std::vector<Op> Ops;
        int CX = N, CY = M;
        for (int BD = D; BD > 0; --BD) {
          const std::vector<int> &PV = Trace[BD];
          const int CK = CX - CY;
          const bool Down = CK == -BD || (CK != BD && PV[Max + CK - 1] < PV[Max + CK + 1]);
          const int PK = Down ? CK + 1 : CK - 1;
          const int PX = PV[Max + PK], PY = PX - PK;
          while (CX > PX + (Down ? 0 : 1) && CY > PY + (Down ? 1 : 0)) {
            Ops.push_back(Op::Keep);
            --CX, --CY;
          }
          Ops.push_back(Down ? Op::Add : Op::Remove);
          CX = PX, CY = PY;
        }
        while (CX > 0 && CY > 0) {
          Ops.push_back(Op::Keep);
          --CX, --CY;
        }
        std::reverse(Ops.begin(), Ops.end());
        return Ops;
      }
    }
  }
  return {};
}

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
  const std::vector<Op> Ops = shortestEdit(A, B);
  std::string Out = "--- " + OldLabel.str() + "\n+++ " + NewLabel.str() + "\n";
  // Group changes into hunks with Context lines around them.
  size_t I = 0;
  const size_t Count = Ops.size();
  // Position in A and B before each op.
  std::vector<size_t> PosA(Count + 1), PosB(Count + 1);
  for (size_t K = 0; K < Count; ++K) {
    PosA[K + 1] = PosA[K] + (Ops[K] != Op::Add);
    PosB[K + 1] = PosB[K] + (Ops[K] != Op::Remove);
  }
  while (I < Count) {
    while (I < Count && Ops[I] == Op::Keep)
      ++I;
    if (I == Count)
      break;
    size_t Start = I >= Context ? I - Context : 0;
    size_t End = I;
    // Extend while the next change is within 2*Context kept lines.
    while (true) {
      while (End < Count && Ops[End] != Op::Keep)
        ++End;
      size_t Next = End;
      while (Next < Count && Ops[Next] == Op::Keep)
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
           " +" + std::to_string(PosB[Start] + (LenB ? 1 : 0)) + "," + std::to_string(LenB) + " @@\n";
    for (size_t K = Start; K < End; ++K) {
      if (Ops[K] == Op::Keep)
        appendLine(Out, ' ', A[PosA[K]]);
      else if (Ops[K] == Op::Remove)
        appendLine(Out, '-', A[PosA[K]]);
      else
        appendLine(Out, '+', B[PosB[K]]);
    }
    I = End;
  }
  return Out;
}

} // namespace accel::migrate
