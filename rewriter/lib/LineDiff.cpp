//===- LineDiff.cpp -------------------------------------------------------------------------===//
#include "LineDiff.h"

#include <algorithm>

namespace accel::migrate {

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

// Myers' greedy algorithm with the V arrays kept for backtracking; D is small for our edits.
std::vector<LineOp> diffLines(const std::vector<llvm::StringRef> &A,
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
        std::vector<LineOp> Ops;
        int CX = N, CY = M;
        for (int BD = D; BD > 0; --BD) {
          const std::vector<int> &PV = Trace[BD];
          const int CK = CX - CY;
          const bool Down = CK == -BD || (CK != BD && PV[Max + CK - 1] < PV[Max + CK + 1]);
          const int PK = Down ? CK + 1 : CK - 1;
          const int PX = PV[Max + PK], PY = PX - PK;
          while (CX > PX + (Down ? 0 : 1) && CY > PY + (Down ? 1 : 0)) {
            Ops.push_back(LineOp::Keep);
            --CX, --CY;
          }
          Ops.push_back(Down ? LineOp::Add : LineOp::Remove);
          CX = PX, CY = PY;
        }
        while (CX > 0 && CY > 0) {
          Ops.push_back(LineOp::Keep);
          --CX, --CY;
        }
        std::reverse(Ops.begin(), Ops.end());
        return Ops;
      }
    }
  }
  return {};
}

} // namespace accel::migrate
