#include <accel/logging.h>

#include <accel_common/contract.h>
#include <accel_common/progress_bar.h>
#include "distributed/collectives.h"
#include "distributed/distributed_state.h"
#include "distributed/environment.h"
#include "log_sink.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <map>
#include <mutex>
#include <stdexcept>

namespace accel {

namespace detail {

struct LoggerState {
  std::string name;
  std::atomic<int> level{static_cast<int>(LogLevel::Info)};
  distributed::ProcessIdentity identity;
};

}  // namespace detail

namespace {

// ACCEL_LOG_LEVEL, else Accelerate's ACCELERATE_LOG_LEVEL; a bad value names its variable.
std::optional<LogLevel> level_from_environment() {
  const auto env = distributed::process_environment();
  for (const char* variable : {contract::kLogLevel, "ACCELERATE_LOG_LEVEL"}) {
    auto value = distributed::env_string(env, variable);
    if (!value) continue;
    try {
      return parse_log_level(*value);
    } catch (const std::invalid_argument& e) {
      TORCH_CHECK(false, "accel: ", variable, "=", *value, ": ", e.what());
    }
  }
  return std::nullopt;
}

}  // namespace

LogLevel parse_log_level(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "debug") return LogLevel::Debug;
  if (lower == "info") return LogLevel::Info;
  if (lower == "warning" || lower == "warn") return LogLevel::Warning;
  if (lower == "error") return LogLevel::Error;
  if (lower == "critical") return LogLevel::Critical;
  throw std::invalid_argument("not a log level (debug, info, warning, error, critical): '" +
                              std::string(name) + "'");
}

Logger get_logger(const std::string& name, std::optional<LogLevel> level) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<detail::LoggerState>> loggers;
  if (!level) level = level_from_environment();
  std::lock_guard<std::mutex> lock(mutex);
  auto& state = loggers[name];
  if (!state) {
    state = std::make_shared<detail::LoggerState>();
    state->name = name;
    state->identity = distributed::detect_process_identity(distributed::process_environment());
  }
  if (level) state->level = static_cast<int>(*level);
  return Logger(state);
}

const std::string& Logger::name() const { return state_->name; }

LogLevel Logger::level() const { return static_cast<LogLevel>(state_->level.load()); }

void Logger::set_level(LogLevel level) { state_->level = static_cast<int>(level); }

bool Logger::writes_here(LogWhere where) const {
  return !where.main_process_only || state_->identity.rank == 0;
}

void Logger::take_turn(LogWhere where, LogLevel level, std::optional<std::string> message) {
  const auto& identity = state_->identity;
  auto write = [&] {
    if (!message) return;
    progress_bar::LiveLineClearance clear_progress_bar;
    tracking::write_log_line(static_cast<int>(level), state_->name, identity.rank, *message);
  };
  if (where.main_process_only || !where.in_order || identity.world_size == 1) return write();

  // Accelerate's order: each process in turn writes, then every process waits for the others.
  const auto distributed = distributed::DistributedState::existing();
  TORCH_CHECK(distributed && distributed->host_group(), "accel: logger '", state_->name,
              "': lines logged in_rank_order wait for the other processes through the "
              "Accelerator's process group; create the Accelerator before logging them");
  for (int64_t turn = 0; turn < identity.world_size; ++turn) {
    if (turn == identity.rank) write();
    distributed::barrier(*distributed->host_group());  // host group: Gloo in every job
  }
}

}  // namespace accel
