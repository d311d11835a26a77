//===- ProgramFacts.h - What a translation unit trains, and where --------------------*- C++ -*-===//
//
// One pass over the translation unit before the checks run: which variables are the models,
// optimizers, schedulers and data loaders to prepare, which already are prepared, where the
// Accelerator lives, and who calls whom (so a model or loader passed down to `train(...)` is
// still known to be prepared inside it).
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "clang/AST/ASTContext.h"
#include "clang/AST/Decl.h"
#include "clang/AST/Expr.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <functional>
#include <vector>

namespace accel::migrate {

class ProgramFacts {
public:
  using EditablePredicate = std::function<bool(clang::SourceLocation)>;
  void analyze(clang::ASTContext &Ctx, const EditablePredicate &IsEditable);

  /// The function that owns the Accelerator: main when this file defines it, else the function
  /// that builds the first optimizer, data loader or model.
  const clang::FunctionDecl *host() const { return Host; }

  const std::vector<const clang::VarDecl *> &models() const { return Models; }
  const std::vector<const clang::VarDecl *> &optimizers() const { return Optimizers; }
  const std::vector<const clang::VarDecl *> &schedulers() const { return Schedulers; }
  const std::vector<const clang::VarDecl *> &loaders() const { return Loaders; }
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

  /// The name of an Accelerator variable or parameter declared in Fn, or "" when none.
  std::string acceleratorIn(const clang::FunctionDecl *Fn) const;

private:
  bool isBoundParam(const clang::ParmVarDecl *P,
                    const std::function<bool(const clang::ValueDecl *, unsigned)> &Pred,
                    unsigned Depth) const;
  bool preparedModel(const clang::ValueDecl *D, unsigned Depth) const;
  bool preparedLoader(const clang::ValueDecl *D, unsigned Depth) const;
  static const clang::ValueDecl *canonical(const clang::ValueDecl *D);

  friend class FactsCollector;
  const clang::FunctionDecl *Host = nullptr;
  std::vector<const clang::VarDecl *> Models, Optimizers, Schedulers, Loaders, Unpaired;
  llvm::SmallPtrSet<const clang::ValueDecl *, 16> ModelSet, LoaderSet, Prepared;
  llvm::DenseMap<const clang::FunctionDecl *, std::vector<const clang::CallExpr *>> Calls;
  llvm::DenseMap<const clang::FunctionDecl *, std::string> AcceleratorNames;
};

} // namespace accel::migrate
