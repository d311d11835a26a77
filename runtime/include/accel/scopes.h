#pragma once

// The scope objects Accelerator's methods return: each does its work in its constructor and
// undoes it in its destructor, so a scope ends however the block is left.

#include <accel/autocast.h>

#include <torch/nn/module.h>

#include <optional>
#include <utility>
#include <vector>

namespace accel {

class Accelerator;

/// One gradient-accumulation micro-step, from `Accelerator::accumulate` (or `accumulate_until`,
/// where the program says which micro-step synchronises). While it lives,
/// `sync_gradients()` tells whether this micro-step synchronises gradients and lets the optimizer
/// step; on the other micro-steps the listed models skip their all-reduce. With mixed precision,
/// the scope also runs under autocast (see `Accelerator::autocast`).
class [[nodiscard]] AccumulateScope {
 public:
  AccumulateScope(AccumulateScope&& other) noexcept;
  AccumulateScope(const AccumulateScope&) = delete;
  AccumulateScope& operator=(const AccumulateScope&) = delete;
  AccumulateScope& operator=(AccumulateScope&&) = delete;
  ~AccumulateScope();

 private:
  friend class Accelerator;
  AccumulateScope(Accelerator* accelerator, std::vector<const torch::nn::Module*> models,
                  std::optional<bool> sync = std::nullopt);
  Accelerator* accelerator_;
  std::vector<const torch::nn::Module*> models_;
  bool skipped_sync_ = false;
  AutocastGuard autocast_;
};

/// Skips gradient synchronisation of one model while it lives (`Accelerator::no_sync`).
class [[nodiscard]] NoSyncGuard {
 public:
  NoSyncGuard(NoSyncGuard&& other) noexcept;
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;
  ~NoSyncGuard();

 private:
  friend class Accelerator;
  NoSyncGuard(Accelerator* accelerator, const torch::nn::Module* model);
  Accelerator* accelerator_;
  const torch::nn::Module* model_;
};

/// One process goes first (the main one, or each machine's local main one): the others wait at
/// construction, the first one waits at destruction (`Accelerator::main_process_first`,
/// `Accelerator::local_main_process_first`).
class [[nodiscard]] MainProcessFirst {
 public:
  MainProcessFirst(MainProcessFirst&& other) noexcept;
  MainProcessFirst(const MainProcessFirst&) = delete;
  MainProcessFirst& operator=(const MainProcessFirst&) = delete;
  MainProcessFirst& operator=(MainProcessFirst&&) = delete;
  ~MainProcessFirst() noexcept(false);

 private:
  friend class Accelerator;
  MainProcessFirst(Accelerator* accelerator, bool goes_first);
  Accelerator* accelerator_;
  bool goes_first_;
};

/// Lets the processes run out of batches at different times (`Accelerator::join_uneven_inputs`).
/// While it lives, every synchronising backward of a listed model first counts the processes
/// still training (a small all-reduce). At its end a process that finished early keeps taking
/// part in the others' gradient all-reduces, contributing zeros, until every process has
/// finished. Gradients are divided by the job's process count throughout, as DDP's Join does by
/// default (divide_by_initial_world_size). Other collectives inside the scope (gather, reduce,
/// save_state) still need every process. With `even_batches` false no samples are repeated, so
/// processes may get different numbers of batches.
///
/// Example:
/// ```
/// {
///   auto join = accelerator.join_uneven_inputs(/*even_batches=*/false, model);
///   for (auto& batch : *loader) { ...; accelerator.backward(loss); optimizer.step(); ... }
/// }  // a process that ran out first shadows the others' all-reduces here
/// ```
class [[nodiscard]] JoinScope {
 public:
  JoinScope(JoinScope&& other) noexcept;
  JoinScope(const JoinScope&) = delete;
  JoinScope& operator=(const JoinScope&) = delete;
  JoinScope& operator=(JoinScope&&) = delete;
  ~JoinScope() noexcept(false);

 private:
  friend class Accelerator;
  JoinScope(Accelerator* accelerator, std::vector<const torch::nn::Module*> models,
            std::optional<bool> even_batches);
  Accelerator* accelerator_;
  std::vector<const torch::nn::Module*> models_;
};

}  // namespace accel
