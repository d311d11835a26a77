//===- ProgramFacts.h - What a translation unit trains, and where -------------------*- C++ -*-===//
//
// One pass over the translation unit before the checks run: which variables are the models,
// optimizers, schedulers and data loaders to prepare, which already are prepared, where the
// Accelerator lives, and who calls whom (so a model or loader passed down to `train(...)` is
// still known to be prepared inside it).
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "ProgramSummary.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/Decl.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/Expr.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <functional>
#include <set>
#include <vector>

namespace accel::migrate {

class ProgramFacts {
public:
  using EditablePredicate = std::function<bool(clang::SourceLocation)>;
  /// OtherFiles: what the program's other files said (empty for a program in one file).
  void analyze(clang::ASTContext &Ctx, const EditablePredicate &IsEditable,
               const ProgramSummary &OtherFiles = {});

  /// The function that owns the Accelerator: main when this file defines it; none when another
  /// file of the program does; else the function that builds the first optimizer or data
  /// loader, unless that function trains a model its caller gives it (the caller, not seen here,
  /// owns the model and must own the Accelerator: the function takes it as a parameter).
  const clang::FunctionDecl *host() const { return Host; }

  /// A model parameter that its function trains (an optimizer is built from its parameters()).
  struct TrainedParameter {
    const clang::ParmVarDecl *Model;
    const clang::VarDecl *Optimizer;
  };
  /// Trained model parameters whose function has no caller in the program's files: the model
  /// is prepared in the function, before its optimizer. (Where callers are seen, each caller
  /// prepares the model it passes, where that model is created.)
  const std::vector<TrainedParameter> &parametersToPrepare() const { return ParametersToPrepare; }

  /// What this file tells the other files of the program (all but Collectives, which the checks
  /// decide).
  ProgramSummary summary() const { return Summary; }
  /// This file saves (see ProgramSummary::Saves).
  void noteSaves() { Summary.Saves = true; }

  const std::vector<const clang::VarDecl *> &models() const { return Models; }
  const std::vector<const clang::VarDecl *> &optimizers() const { return Optimizers; }
  const std::vector<const clang::VarDecl *> &schedulers() const { return Schedulers; }
  const std::vector<const clang::VarDecl *> &loaders() const { return Loaders; }
  /// `return make_data_loader(...)` in a function that returns the loader it makes (a dataset
  /// class's getDataLoader()): prepared there, and what its callers get is a prepared loader.
  const std::vector<const clang::CallExpr *> &returnedLoaders() const { return ReturnedLoaders; }
  /// Loaders made here whose every use is a loop that feeds no model (no backward, no model
  /// named in it: a pass that builds a data structure): not loaders() nor prepared, since each
  /// process must read all of what they yield; a split and padded pass would count samples N
  /// times or miss some.
  const std::vector<const clang::VarDecl *> &loadersFeedingNoModel() const {
    return LoadersFeedingNoModel;
  }
  /// Members of classes that train: the models whose parameters() a member optimizer (or any
  /// optimizer) takes, and the member optimizers (by value or by pointer), prepared where the
  /// class builds or sets them.
  const std::vector<const clang::FieldDecl *> &memberModels() const { return MemberModels; }
  const std::vector<const clang::FieldDecl *> &memberOptimizers() const { return MemberOptimizers; }
  /// Where a member optimizer is initialized in a constructor's initializer list (its default
  /// member initializer is the FieldDecl's in-class initializer).
  struct MemberInitializer {
    const clang::CXXConstructorDecl *Constructor;
    const clang::CXXCtorInitializer *Initializer;
  };
  const std::vector<MemberInitializer> &initializersOf(const clang::FieldDecl *F) const;
  /// The values a member optimizer held by pointer is assigned in methods of its class
  /// (`optimizer = new torch::optim::Adam(...)` in a constructor's body).
  const std::vector<const clang::Expr *> &assignmentsOf(const clang::FieldDecl *F) const;
  /// The assignments (`model = new Net(...)`, `model = std::make_shared<Net>()`) to any other
  /// member in methods of its class, as written.
  const std::vector<const clang::Stmt *> &assignmentStatementsOf(const clang::FieldDecl *F) const;

  /// Optimizers whose parameters come from no model variable it can see.
  const std::vector<const clang::VarDecl *> &unpairedOptimizers() const { return Unpaired; }

  /// Already migrated: `accelerator.prepare(x)` was called on it, or it was declared from an
  /// accelerator call.
  bool alreadyPrepared(const clang::ValueDecl *D) const { return Prepared.count(canonical(D)); }

  /// A prepared model: one of models(), or a parameter every caller passes a prepared model to.
  bool isPreparedModel(const clang::ValueDecl *D) const;
  /// The same for data loaders.
  bool isPreparedLoader(const clang::ValueDecl *D) const;

  /// Calls whose callee is Fn or an instantiation of it.
  const std::vector<const clang::CallExpr *> &callsTo(const clang::FunctionDecl *Fn) const;

  /// The name of an Accelerator variable or parameter declared in Fn (for a method, also a
  /// reference member of its class), or "" when none.
  std::string acceleratorIn(const clang::FunctionDecl *Fn) const;
  /// The name of a class's accel::Accelerator& member, or "" when it has none.
  std::string acceleratorMemberOf(const clang::CXXRecordDecl *RD) const;

private:
  bool isBoundParam(const clang::ParmVarDecl *P,
                    const std::function<bool(const clang::ValueDecl *, unsigned)> &Pred,
                    unsigned Depth) const;
  bool preparedModel(const clang::ValueDecl *D, unsigned Depth) const;
  bool preparedLoader(const clang::ValueDecl *D, unsigned Depth) const;
  void setAsideLoadersFeedingNoModel(const EditablePredicate &IsEditable);
  void resolveTrainedParameters(const ProgramSummary &OtherFiles,
                                const EditablePredicate &IsEditable);
  void resolveLoaderFactories(const ProgramSummary &OtherFiles);
  void noteModelArgument(const clang::CallExpr *Call, unsigned Index,
                         const EditablePredicate &IsEditable);
  static const clang::ValueDecl *canonical(const clang::ValueDecl *D);

  friend class FactsCollector;
  const clang::FunctionDecl *Host = nullptr;
  std::vector<const clang::VarDecl *> Models, Optimizers, Schedulers, Loaders, Unpaired;
  std::vector<const clang::VarDecl *> LoadersFeedingNoModel;
  std::vector<const clang::CallExpr *> ReturnedLoaders;
  // Loader variables initialized by a call (`auto loader = data->getDataLoader();`), and the
  // USRs of the functions here that return a loader they make.
  std::vector<std::pair<const clang::VarDecl *, const clang::FunctionDecl *>> LoadersFromCalls;
  std::set<std::string> LoaderFactoryUsrs;
  std::vector<const clang::FieldDecl *> MemberModels, MemberOptimizers;
  llvm::DenseMap<const clang::FieldDecl *, std::vector<MemberInitializer>> MemberInitializers;
  llvm::DenseMap<const clang::FieldDecl *, std::vector<const clang::Expr *>> MemberAssignments;
  llvm::DenseMap<const clang::FieldDecl *, std::vector<const clang::Stmt *>>
      MemberAssignmentStatements;
  llvm::DenseMap<const clang::CXXRecordDecl *, std::string> AcceleratorMembers;
  llvm::SmallPtrSet<const clang::ValueDecl *, 16> ModelSet, LoaderSet, Prepared;
  llvm::DenseMap<const clang::FunctionDecl *, std::vector<const clang::CallExpr *>> Calls;
  llvm::DenseMap<const clang::FunctionDecl *, std::string> AcceleratorNames;
  // References to user functions, and those that are the callee of a call.
  std::vector<TrainedParameter> TrainedParameters, ParametersToPrepare;
  llvm::SmallPtrSet<const clang::ParmVarDecl *, 8> TrainedParameterSet;
  ProgramSummary Summary;
};

} // namespace accel::migrate
