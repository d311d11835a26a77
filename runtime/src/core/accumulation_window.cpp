#include "accumulation_window.h"

#include <c10/util/Exception.h>

#include <utility>

namespace accel {
namespace core {

bool AccumulationWindow::begin(const std::vector<const torch::nn::Module*>& models,
                               std::optional<bool> sync) {
  ++step_;
  program_counts_ = sync.has_value();
  bool synchronises = true;
  if (sync) {
    synchronises = *sync;
  } else if (loop_.loader.end_of_dataloader() && options_.sync_with_dataloader) {
    micro_step_ = 0;
  } else {
    micro_step_ += 1;
    synchronises = micro_step_ % options_.gradient_accumulation_steps == 0;
  }
  loop_.sync.set_sync_gradients(synchronises);
  if (synchronises) return false;
  // sync_each_batch: the models synchronise on every micro-step; the optimizers still wait.
  if (!options_.sync_each_batch) {
    for (const auto* model : models) models_.enter_no_sync(model);
  }
  loop_.optimizers.close_all();
  return true;
}

void AccumulationWindow::end(const std::vector<const torch::nn::Module*>& models,
                             bool skipped_sync) {
  program_counts_ = false;
  if (!skipped_sync) return;
  if (!options_.sync_each_batch) {
    for (const auto* model : models) models_.exit_no_sync(model);
  }
  loop_.optimizers.open_all();
}

void AccumulationWindow::restore(const checkpoints::WindowCounters& counters, bool in_window) {
  step_ = counters.step;
  micro_step_ = counters.micro_step;
  items_ = counters.items;
  loop_.sync.set_sync_gradients(!in_window);
}

int64_t AccumulationWindow::loss_divisor(bool counts_items) const {
  return program_counts_ || counts_items ? 1 : options_.gradient_accumulation_steps;
}

std::optional<int64_t> AccumulationWindow::take_held_items() {
  return std::exchange(pending_items_, std::nullopt);
}

bool AccumulationWindow::count_items(std::optional<int64_t> items, bool joined) {
  if (!items_.open) items_ = {true, items.has_value(), 0};
  const bool mixed = items_.counts_items != items.has_value();
  if (items) items_.items += *items;
  const bool ends_window = loop_.sync.sync_gradients();
  if (ends_window) items_.open = false;
  TORCH_CHECK(!mixed,
              "accel: this accumulation window mixes backward(loss) and backward(loss_sum, "
              "num_items); a window's losses are all means or all sums over counted items");
  TORCH_CHECK(!items || !joined,
              "accel: backward(loss_sum, num_items) counts items with a collective, which the "
              "processes that ran out of batches under join_uneven_inputs do not join; use "
              "backward(loss) there");
  return ends_window;
}

}  // namespace core
}  // namespace accel
