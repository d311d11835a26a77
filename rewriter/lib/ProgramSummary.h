//===- ProgramSummary.h - What one file tells the others of a program ---------------*- C++ -*-===//
//
// A program in several files is migrated one translation unit at a time, but it is one program:
// main creates the Accelerator (every other function binds the process's), a model one file
// trains is prepared where another creates it, a collective one file reaches is one its callers
// elsewhere make. Each translation unit therefore exports what the others must know of it
// (functions named by their USR, the same in every file that declares them), and the migration
// runs again over the files that learned something (Migrator), until nothing new is learned.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "llvm/ADT/StringRef.h"

#include <map>
#include <set>
#include <string>
#include <utility>

namespace clang {
class Decl;
}

namespace accel::migrate {

struct ProgramSummary {
  /// This file defines main, which creates the Accelerator: no other file creates one.
  bool DefinesMain = false;
  /// Functions here bind the process's Accelerator (Accelerator::current()): main must create
  /// one, even where main itself uses none.
  bool BindsAccelerator = false;
  /// (function, parameter index) of the models that functions defined here train: an optimizer
  /// is built from the parameter's parameters(). Their callers prepare what they pass.
  std::set<std::pair<std::string, unsigned>> TrainedModelParameters;
  /// User functions (declared in an editable file) this file calls, and user classes it
  /// constructs.
  std::set<std::string> Called;
  /// User functions defined here that reach a collective (a call every process must make), with
  /// the call they reach ("gather_for_metrics() at eval.cpp:12:5"): a caller elsewhere that
  /// calls them on some processes only hangs as if it made that call itself.
  std::map<std::string, std::string> Collectives;
  /// This file saves (torch::save, on the main process once migrated): a load in any file of the
  /// program waits for every process first, so that none reads a file still being written.
  bool Saves = false;
  /// Functions defined here that return a loader they make (`return make_data_loader(...)`,
  /// prepared there), with every method they override: a loader a caller elsewhere gets from one
  /// is prepared.
  std::set<std::string> LoaderFactories;

  bool called(const std::string &Usr) const { return Called.count(Usr) != 0; }

  /// Adds what Other says.
  void merge(const ProgramSummary &Other);
  /// What, of Others (the other files' summaries merged), can change the migration of the file
  /// that exported Own: the rest is left out, so that an unchanged result means nothing to redo.
  static ProgramSummary relevantTo(const ProgramSummary &Own, const ProgramSummary &Others);

  bool operator==(const ProgramSummary &O) const {
    return DefinesMain == O.DefinesMain && BindsAccelerator == O.BindsAccelerator &&
           TrainedModelParameters == O.TrainedModelParameters && Called == O.Called &&
           Collectives == O.Collectives && Saves == O.Saves && LoaderFactories == O.LoaderFactories;
  }
  bool operator!=(const ProgramSummary &O) const { return !(*this == O); }
};

/// The USR of D (Clang's unified symbol resolution name): the same for every declaration of one
/// function in every translation unit. Empty when Clang cannot name it.
std::string usrOf(const clang::Decl *D);

} // namespace accel::migrate
