#pragma once

// A progress bar for training loops (Accelerate's `tqdm(main_process_only=True)`): drawn by the
// local main process only, the others stay silent. On a terminal it is redrawn in place with the
// count, percentage, rate and time left; when stderr is not a terminal (a CI log, a file) it
// becomes a plain line at each tenth of the way and at the end. accel::Logger lines erase and
// redraw it, so they do not land in the middle of the bar.
//
// Example:
// ```
// for (auto& batch : accel::progress(*loader, accel::ProgressOptions().description("epoch 1"))) {
//   ...
// }
// accel::ProgressBar bar(steps, accel::ProgressOptions().description("train"));
// for (...) { ...; bar.set_postfix({{"loss", loss}}); bar.update(); }
// ```

#include <accel/tracking.h>

#include <torch/arg.h>

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace accel {

namespace progress_bar {
class Renderer;
}

struct ProgressOptions {
  /// Text before the bar ("epoch 1").
  TORCH_ARG(std::string, description) = "";
  /// What one step is called in the rate ("it/s", "batch/s").
  TORCH_ARG(std::string, unit) = "it";
  /// Steps of the total already done: a loader resumed mid-epoch (skip_first_batches) still
  /// counts the whole epoch in size().
  TORCH_ARG(int64_t, initial) = 0;
  /// Drawn by the local main process only (one bar per machine, as Accelerate's tqdm); false:
  /// every process draws its own.
  TORCH_ARG(bool, main_process_only) = true;
  /// Draws nothing anywhere.
  TORCH_ARG(bool, disable) = false;
};

/// One bar. It is finished (its last state drawn, the line ended) by close() or its destructor.
/// Use it from one thread.
class ProgressBar {
 public:
  /// A bar for `total` steps; without a total it shows the count and rate only.
  explicit ProgressBar(std::optional<int64_t> total, ProgressOptions options = {});
  ~ProgressBar();
  ProgressBar(ProgressBar&&) noexcept;
  ProgressBar& operator=(ProgressBar&&) noexcept;

  /// Counts `n` more steps; redrawn at most every 0.1 s on a terminal.
  void update(int64_t n = 1);
  /// Shows `values` after the rate: "loss=0.1234, lr=0.001".
  void set_postfix(const TrackerValues& values);
  void set_description(std::string description);
  /// Draws the final state and ends the line.
  void close();

  int64_t count() const;
  /// Whether this process draws the bar.
  bool visible() const;

 private:
  std::unique_ptr<progress_bar::Renderer> renderer_;
};

/// Iterates a range (a prepared loader, a vector) while a bar counts its elements; the bar's
/// total is the range's size(). Made by accel::progress().
template <typename Range>
class ProgressRange {
 public:
  using InnerIterator = decltype(std::begin(std::declval<Range&>()));

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = typename std::iterator_traits<InnerIterator>::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = typename std::iterator_traits<InnerIterator>::pointer;
    using reference = typename std::iterator_traits<InnerIterator>::reference;

    reference operator*() { return *inner_; }
    Iterator& operator++() {
      ++inner_;
      if (bar_ != nullptr) bar_->update();
      return *this;
    }
    bool operator==(const Iterator& other) const { return inner_ == other.inner_; }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    friend class ProgressRange;
    Iterator(InnerIterator inner, ProgressBar* bar) : inner_(std::move(inner)), bar_(bar) {}
    InnerIterator inner_;
    ProgressBar* bar_;
  };

  ProgressRange(Range& range, ProgressOptions options)
      : range_(range), bar_(static_cast<int64_t>(std::size(range)), std::move(options)) {}

  Iterator begin() { return Iterator(std::begin(range_), &bar_); }
  Iterator end() { return Iterator(std::end(range_), nullptr); }
  /// The bar, for set_postfix inside the loop.
  ProgressBar& bar() { return bar_; }

 private:
  Range& range_;
  ProgressBar bar_;
};

/// `for (auto& batch : accel::progress(*loader))`: the loop with a bar over its batches. The bar
/// ends when the loop's range object is destroyed (after the loop).
template <typename Range>
ProgressRange<Range> progress(Range& range, ProgressOptions options = {}) {
  return ProgressRange<Range>(range, std::move(options));
}

}  // namespace accel
