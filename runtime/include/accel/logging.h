#pragma once

// Logging for multi-process programs (Accelerate's `get_logger`): a named, leveled logger whose
// lines go to stderr once, from the main process, unless a call asks for every process, and then
// optionally in rank order. Lines carry the time, the process's rank, the level and the logger's
// name. Messages are formatted with fmt (the copy LibTorch ships, used header-only: linking
// accel::accel defines FMT_HEADER_ONLY); the line is written by spdlog.
//
// Example:
// ```
// auto logger = accel::get_logger("train");
// logger.info("epoch {} loss {:.4f}", epoch, loss);                  // main process only
// logger.info(accel::all_processes, "shard of {} samples", n);       // every process
// logger.warning(accel::in_rank_order, "rank-local note: {}", note);  // every process, rank order
// ```

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace accel {

/// Levels as Python's logging has them. A logger writes the lines at or above its level.
enum class LogLevel { Debug = 10, Info = 20, Warning = 30, Error = 40, Critical = 50 };

/// "debug", "info", "warning" (or "warn"), "error", "critical", any case; anything else throws
/// std::invalid_argument listing these.
LogLevel parse_log_level(std::string_view name);

/// Which processes write a line (Accelerate's `main_process_only` and `in_order`).
struct LogWhere {
  bool main_process_only = true;
  /// With main_process_only false: process 0 writes first, then 1, and so on. Every process must
  /// make the call (each waits for the others), as every process makes a collective.
  bool in_order = false;
};
/// The default: the main process writes, the others format nothing.
inline constexpr LogWhere main_process_only{true, false};
/// Every process writes its own line, as soon as it logs.
inline constexpr LogWhere all_processes{false, false};
/// Every process writes its own line, in rank order (a collective: every process must call).
inline constexpr LogWhere in_rank_order{false, true};

namespace detail {
struct LoggerState;
}

/// A handle on a named logger (copies share it). Get one with get_logger().
class Logger {
 public:
  const std::string& name() const;
  LogLevel level() const;
  /// Changes the level for every handle on this name.
  void set_level(LogLevel level);
  bool enabled(LogLevel level) const {
    return static_cast<int>(level) >= static_cast<int>(this->level());
  }

  template <typename... Args>
  void log(LogLevel level, LogWhere where, fmt::format_string<Args...> format, Args&&... args) {
    if (!enabled(level)) return;  // the level is the same on every process: all skip together
    if (!writes_here(where)) return take_turn(where, level, std::nullopt);
    take_turn(where, level, fmt::format(format, std::forward<Args>(args)...));
  }

  /// debug/info/warning/error/critical: log() at that level, from the main process unless
  /// `where` says otherwise.
  template <typename... Args>
  void debug(fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::Debug, main_process_only, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void debug(LogWhere where, fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::Debug, where, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void info(fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::Info, main_process_only, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void info(LogWhere where, fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::Info, where, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void warning(fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::Warning, main_process_only, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void warning(LogWhere where, fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::Warning, where, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void error(fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::Error, main_process_only, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void error(LogWhere where, fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::Error, where, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void critical(fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::Critical, main_process_only, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void critical(LogWhere where, fmt::format_string<Args...> format, Args&&... args) {
    log(LogLevel::Critical, where, format, std::forward<Args>(args)...);
  }

 private:
  friend Logger get_logger(const std::string& name, std::optional<LogLevel> level);
  explicit Logger(std::shared_ptr<detail::LoggerState> state) : state_(std::move(state)) {}
  /// Whether this process writes a line logged with `where`.
  bool writes_here(LogWhere where) const;
  /// Writes `message` (when this process has one) at this process's turn of `where`.
  void take_turn(LogWhere where, LogLevel level, std::optional<std::string> message);

  std::shared_ptr<detail::LoggerState> state_;
};

/// The logger called `name` (one per name in the process). Its level is `level` when given, else
/// ACCEL_LOG_LEVEL (or Accelerate's ACCELERATE_LOG_LEVEL) when set, else the level it had, Info
/// for a new one. A malformed variable throws naming it. Lines logged `in_rank_order` wait for
/// the other processes through the Accelerator's process group, so they need an Accelerator.
Logger get_logger(const std::string& name, std::optional<LogLevel> level = std::nullopt);

}  // namespace accel
