#include "log_sink.h"

#ifdef ACCEL_WITH_SPDLOG
#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#else
#include <cstdio>
#include <ctime>
#endif

#include <map>
#include <memory>
#include <mutex>

namespace accel {
namespace tracking {
namespace {

#ifdef ACCEL_WITH_SPDLOG

spdlog::level::level_enum spdlog_level(int level) {
  if (level >= 50) return spdlog::level::critical;
  if (level >= 40) return spdlog::level::err;
  if (level >= 30) return spdlog::level::warn;
  if (level >= 20) return spdlog::level::info;
  return spdlog::level::debug;
}

// One spdlog logger per name and rank, sharing one stderr sink (spdlog's sinks lock, so lines
// from several threads do not interleave). Not in spdlog's global registry: a program using
// spdlog itself keeps its own names.
std::shared_ptr<spdlog::logger> logger_for(const std::string& name, int64_t rank) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int64_t>, std::shared_ptr<spdlog::logger>> loggers;
  static const auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& logger = loggers[{name, rank}];
  if (!logger) {
    logger = std::make_shared<spdlog::logger>(name, sink);
    logger->set_pattern("%^[%Y-%m-%d %H:%M:%S] [rank " + std::to_string(rank) + "] [%l]%$ %n: %v");
    logger->set_level(spdlog::level::trace);  // accel::Logger filters by level itself
    logger->flush_on(spdlog::level::trace);
  }
  return logger;
}

#else

const char* level_name(int level) {
  if (level >= 50) return "critical";
  if (level >= 40) return "error";
  if (level >= 30) return "warning";
  if (level >= 20) return "info";
  return "debug";
}

#endif

}  // namespace

void write_log_line(int level, const std::string& logger_name, int64_t rank,
                    std::string_view message) {
#ifdef ACCEL_WITH_SPDLOG
  logger_for(logger_name, rank)
      ->log(spdlog_level(level), spdlog::string_view_t(message.data(), message.size()));
#else
  // spdlog's layout without its colours, one write per line.
  static std::mutex mutex;
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char time_text[32];
  std::strftime(time_text, sizeof(time_text), "%Y-%m-%d %H:%M:%S", &local);
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "[%s] [rank %lld] [%s] %s: %.*s\n", time_text, static_cast<long long>(rank),
               level_name(level), logger_name.c_str(), static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
#endif
}

}  // namespace tracking
}  // namespace accel
