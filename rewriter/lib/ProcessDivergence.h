//===- ProcessDivergence.h - Values that differ between processes, calls that need all -*- C++
//-*-===//
//
// The facts the divergent-collective check reasons with, over one translation unit:
//  - which calls communicate with every process (collectives): the Accelerator's communicating
//    methods, a prepared model's forward, backward, and user functions that reach one of these
//    (in this file, or, by USR, in another file of the program);
//  - which values may differ between processes: the process's identity (is_main_process(),
//    process_index(), ...), a tensor's item() read from this process's batches when no collective
//    has combined them, and every
//    variable, parameter or return value that takes its value (or is set under a condition) from
//    those.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "ProgramFacts.h"
#include "ProgramSummary.h"

#include "clang/AST/Decl.h"
#include "clang/AST/Expr.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace accel::migrate {

class ProcessDivergence {
public:
  using FileOf = std::function<std::string(clang::SourceLocation)>;
  /// Functions: the functions with bodies to analyze (those of the files we may edit).
  /// Reduced: variables the migration itself combines across processes (see
  /// MigrationContext::reducedVariables), taken as the same on every process.
  ProcessDivergence(const ProgramFacts &Facts,
                    const std::vector<const clang::FunctionDecl *> &Functions,
                    const ProgramSummary &OtherFiles, FileOf Where,
                    const std::set<const clang::Decl *> &Reduced = {});

  /// What the call communicates, as the report names it ("save_state()", "the forward of the
  /// prepared model `model`", "evaluate(), which calls gather_for_metrics() at f.cpp:3:5"), or ""
  /// when it is not a collective.
  std::string collective(const clang::CallExpr *Call) const;

  /// Why E may differ between processes ("is_main_process()", "`best`, set from ... at
  /// f.cpp:9:3"), or "" when it is the same on every process as far as we can see.
  std::string perProcess(const clang::Expr *E) const;

  /// Functions defined here that reach a collective, by USR, with what they reach (for the
  /// program's other files).
  std::map<std::string, std::string> exportedCollectives() const;

private:
  struct Flow {
    const clang::Decl *Target; // variable, parameter, field, or function (its return value)
    const clang::Expr *Source;
    std::vector<const clang::Expr *> Conditions; // the conditions the assignment is under
    clang::SourceLocation Loc;
  };
  class FlowCollector;
  void collectFlows(const clang::FunctionDecl *Fn);
  void solve();
  std::string directCollective(const clang::CallExpr *Call) const;
  bool combinesProcesses(const clang::Expr *E) const;
  bool isLocalTensor(const clang::Expr *E) const;
  std::string where(clang::SourceLocation Loc) const;

  const ProgramFacts &Facts;
  const ProgramSummary &OtherFiles;
  FileOf Where;
  std::vector<const clang::FunctionDecl *> Functions;
  std::vector<Flow> Flows;
  llvm::DenseMap<const clang::Decl *, std::string> Tainted; // decl -> why it differs
  // Objects (tensors, batches) computed from this process's share of the data.
  llvm::DenseSet<const clang::Decl *> LocalObjects;
  // Variables given a collective's result somewhere (`predictions =
  // accelerator.gather_for_metrics(predictions)`): taken as the same on every process, since
  // the analysis does not follow the order of assignments and a false report blocks migration.
  llvm::DenseSet<const clang::Decl *> Combined;
  llvm::DenseMap<const clang::FunctionDecl *, std::string> CollectiveFunctions;
};

} // namespace accel::migrate
