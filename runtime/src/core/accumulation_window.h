#pragma once

// Gradient accumulation as the Accelerator keeps it: the accumulate() calls (`step`), the
// micro-steps since the last synchronisation, whether the current micro-step synchronises (told to
// the prepared optimizers and schedulers through the training loop), the models held in no_sync
// while it does not, and the items a window of summed losses counted. AccumulateScope opens and
// closes micro-steps here; backward() asks how to scale its loss and counts its items;
// save_state/load_state keep the counters.

#include "checkpoint/training_state.h"
#include "optim/training_loop.h"
#include "prepared_models.h"

#include <accel/options.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace accel {
namespace core {

class AccumulationWindow {
 public:
  AccumulationWindow(const ResolvedOptions& options, detail::TrainingLoop& loop,
                     PreparedModels& models)
      : options_(options), loop_(loop), models_(models) {}

  /// Opens a micro-step: with `sync` (accumulate_until) the program decides whether it
  /// synchronises, else the counter and the loader's end do. Returns whether it skips
  /// synchronisation, the models then entering no_sync and the optimizers' gates closing.
  bool begin(const std::vector<const torch::nn::Module*>& models, std::optional<bool> sync);
  void end(const std::vector<const torch::nn::Module*>& models, bool skipped_sync);

  /// What backward() divides a loss by: 1 where the program counts its own micro-steps, or the
  /// loss is a sum over counted items; else the accumulation steps.
  int64_t loss_divisor(bool counts_items) const;

  /// backward(loss_sum, num_items)'s count, held for the backward it calls.
  void hold_items(int64_t items) { pending_items_ = items; }
  std::optional<int64_t> take_held_items();
  /// Counts this backward's items (none: a mean loss) into the window, refusing a window that
  /// mixes the two and, `joined`, a counted one inside join_uneven_inputs; true when this
  /// backward ends the window.
  bool count_items(std::optional<int64_t> items, bool joined);
  /// This process's items counted in the window so far.
  int64_t counted_items() const { return items_.items; }

  /// accumulate() calls so far; reset by free_memory.
  int64_t step() const { return step_; }
  void reset_step() { step_ = 0; }
  /// What save_state writes, and load_state hands back (the micro-step then synchronises
  /// unless the checkpoint was taken inside a window).
  checkpoints::WindowCounters counters() const { return {step_, micro_step_, items_}; }
  void restore(const checkpoints::WindowCounters& counters, bool in_window);

 private:
  const ResolvedOptions& options_;
  detail::TrainingLoop& loop_;
  PreparedModels& models_;
  int64_t step_ = 0;
  /// Micro-steps counted since the last synchronisation (Accelerate's GradientState.step).
  int64_t micro_step_ = 0;
  /// Inside an accumulate_until() scope: the program counts its micro-steps and divides its loss.
  bool program_counts_ = false;
  std::optional<int64_t> pending_items_;
  checkpoints::ItemWindow items_;
};

}  // namespace core
}  // namespace accel
