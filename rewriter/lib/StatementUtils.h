//===- StatementUtils.h - Small AST helpers shared by the checks --------------------*- C++ -*-===//
#pragma once

#include "MigrationContext.h"

#include "clang/AST/Expr.h"
#include "clang/AST/StmtCXX.h"

#include <vector>

namespace accel::migrate {

/// E without parentheses, implicit casts, temporaries and copies: the expression as written.
const clang::Expr *stripTemporaries(const clang::Expr *E);
/// The arguments written at the call (default arguments left out).
std::vector<const clang::Expr *> explicitArgs(const clang::CallExpr *Call);

/// The statement an expression is the whole of (walking out through implicit nodes), or null
/// when the expression is part of a larger one.
const clang::Stmt *asFullStatement(MigrationContext &Context, const clang::Expr *E);

/// The nearest range-for around S whose loop variable is Var, or null.
const clang::CXXForRangeStmt *rangeForOver(MigrationContext &Context, const clang::Stmt *S,
                                           const clang::ValueDecl *Var);

/// True when S runs under `if (accelerator.is_main_process())` (or is_local_main_process, or
/// accel::state()'s).
bool guardedByMainProcess(MigrationContext &Context, const clang::Stmt *S);

/// True when S runs only when a condition in its function holds (an if or switch branch, a ?:
/// operand, the right of && or ||): a collective there may be reached by some processes only.
bool underCondition(MigrationContext &Context, const clang::Stmt *S);

/// The body of a for, range-for, while or do loop; null for any other statement.
const clang::Stmt *loopBody(const clang::Stmt *Loop);

/// True for a range-for over a prepared data loader.
bool iteratesPreparedLoader(MigrationContext &Context, const clang::CXXForRangeStmt *Loop);

/// True when S (a statement or a whole function) contains a range-for over a prepared loader.
bool containsPreparedLoaderLoop(MigrationContext &Context, const clang::Stmt *S);

/// True when E only computes on tensors: Tensor methods, LibTorch's free functions and
/// operators, and loss modules (not a model's forward, not a method of the user's).
bool isPureTensorComputation(const clang::Expr *E);

/// True when Value (added to a metric in Loop's body) takes `.item()` of a tensor the body
/// computes per batch other than from its samples alone (a model's loss: `loss.item<double>()`,
/// `loss.item<double>() * x.size(0)`): one number per batch, which is summed across processes
/// after the loop, never gathered (gathered, it would have one element per process). With
/// InPlaceToo, also the item() of such a computation written in place (`criterion(
/// model->forward(x), y).item()`): for a loop whose body is one statement, which nothing gathers
/// from; in a braced body gather-for-metrics gathers what it reads, which counts every sample
/// once where a sum reduced across processes would count the samples an even last batch repeats.
bool takesItemOfBatchResult(const clang::CXXForRangeStmt *Loop, const clang::Expr *Value,
                            bool InPlaceToo = false);

/// True when Value (added to a metric in Loop's body) reads a tensor whose rows are not the
/// batch's samples: tokens of a packed or flattened sequence batch (`pack_padded_sequence(...)
/// .data()`, `view({-1, n})`, `flatten()`, `masked_select`). Their counts differ between
/// processes, so they cannot be gathered (nor cut to the samples of a last batch): a sum of them
/// is reduced after the loop with its divisor, like a loss.
bool readsTokensNotSamples(const clang::CXXForRangeStmt *Loop, const clang::Expr *Value);

/// A call in a loop's body that slices a tensor declared before the loop by the loop's counter
/// (`narrow`, `slice`, `index`, `select`, `[]`), and that tensor.
struct CountedSlice {
  const clang::Expr *Call;
  const clang::VarDecl *Source;
};
std::vector<CountedSlice> countedSlices(const clang::SourceManager &SM, const clang::Stmt *Loop);

/// One batch a training loop slices by hand from a tensor along its first dimension, by the
/// loop's counter: the local it initializes, the initializer, and the variables other than the
/// counter that size the slice (`batch_size` in `X.slice(0, i, i + batch_size)`).
struct HandSlicedBatch {
  const clang::VarDecl *Local;
  const clang::Expr *Init;
  std::vector<const clang::VarDecl *> Sizes;
};

/// The batches Loop (a `for` whose body calls backward(), over no prepared loader) slices by hand
/// along the first dimension, declared at the top level of its body; empty when it slices none
/// or slices any other way too (along another dimension, or one row with `X[i]`).
/// Refusal, when given, says why batches the loop slices are not returned even so (the size
/// that slices them also sizes another tensor, or the batch is used by it).
std::vector<HandSlicedBatch> handSlicedBatches(MigrationContext &Context,
                                               const clang::ForStmt *Loop,
                                               std::string *Refusal = nullptr);

/// The variables a `for` loop's init declares or assigns (`for (i = 0; ...)`): its counters.
std::vector<const clang::VarDecl *> loopCounters(const clang::Stmt *Loop);

/// Whether S names Var anywhere.
bool mentions(const clang::Stmt *S, const clang::VarDecl *Var);

/// What `acc += value` adds (an operator+= call too): value; null for any other statement.
const clang::Expr *addedValue(const clang::Stmt *S);
/// The value an assignment statement (`a = b`, or an operator= call) gives; null for any other.
const clang::Expr *assignedValue(const clang::Stmt *S);
/// What an assignment statement assigns to (`a` of `a = b`, or of an operator= call); null for
/// any other.
const clang::Expr *assignedTarget(const clang::Stmt *S);

/// Source text of the arguments of Call from index First on ("" when there are none).
std::string argumentsText(MigrationContext &Context, const std::vector<const clang::Expr *> &Args,
                          size_t First);

} // namespace accel::migrate
