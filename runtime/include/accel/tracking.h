#pragma once

// Experiment tracking (Accelerate's `log_with`, `init_trackers`, `log`): the values a training
// loop logs, and the interface every tracker implements. The built-in trackers are chosen by name
// ("tensorboard", "csv", "jsonl", "mlflow", or "all") in AcceleratorOptions::log_with; a program's
// own are GeneralTracker subclasses passed in AcceleratorOptions::trackers. All run on the main
// process only.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace accel {

/// One logged value: a boolean, an integer, a real number or a string. Built implicitly from any
/// of those, and from a one-element tensor (its value, as a real number), so that
/// `accelerator.log({{"loss", loss}, {"epoch", epoch}}, step)` reads as in Python.
class TrackerValue {
 public:
  using Variant = std::variant<bool, int64_t, double, std::string>;

  TrackerValue(bool value) : value_(value) {}  // NOLINT(google-explicit-constructor)
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  TrackerValue(T value) : value_(static_cast<int64_t>(value)) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  TrackerValue(T value) : value_(static_cast<double>(value)) {}    // NOLINT
  TrackerValue(std::string value) : value_(std::move(value)) {}    // NOLINT
  TrackerValue(const char* value) : value_(std::string(value)) {}  // NOLINT
  /// A tensor of one element (a loss, an accuracy), read on the CPU; any other is an error.
  TrackerValue(const at::Tensor& value);  // NOLINT

  const Variant& get() const { return value_; }
  bool is_number() const { return !std::holds_alternative<std::string>(value_); }
  /// The value as a real number (booleans 0 or 1); throws for a string.
  double number() const;
  /// The value as text ("true", "3", "0.25", the string itself).
  std::string text() const;

 private:
  Variant value_;
};

/// Named values in the order given: one step's metrics, or a run's configuration.
using TrackerValues = std::vector<std::pair<std::string, TrackerValue>>;

/// A tracker: where init_trackers' configuration and log's values go. Subclass it for a service
/// of your own and pass it in AcceleratorOptions::trackers. Called on the main process only. A
/// tracker that throws is stopped, with a message naming it, and training goes on.
class GeneralTracker {
 public:
  virtual ~GeneralTracker() = default;
  /// The name log_with and get_tracker use ("tensorboard").
  virtual std::string name() const = 0;
  /// Called once by init_trackers, before anything is logged: the run's name (its project), the
  /// folder trackers write under (ProjectConfiguration::logging_dir), and the init_kwargs given
  /// for this tracker's name.
  virtual void start(const std::string& run_name, const std::string& logging_dir,
                     const TrackerValues& options) {
    (void)run_name;
    (void)logging_dir;
    (void)options;
  }
  /// The run's configuration (hyperparameters), from init_trackers.
  virtual void store_init_configuration(const TrackerValues& config) = 0;
  /// One call of Accelerator::log: finite numbers and strings, at `step` when given.
  virtual void log(const TrackerValues& values, std::optional<int64_t> step) = 0;
  /// The end of training (Accelerator::end_training): write out what is pending and close.
  virtual void finish() {}
};

}  // namespace accel
