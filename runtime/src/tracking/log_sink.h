#pragma once

// Where accel::Logger's lines are written: spdlog's stderr sink. Free of LibTorch's headers, so
// that spdlog sees Debian's fmt (which it was built with), not the newer fmt inside the torch
// wheel.

#include <cstdint>
#include <string>
#include <string_view>

namespace accel {
namespace tracking {

/// Writes "[time] [rank R] [level] name: message" to stderr, coloured when stderr is a terminal.
/// `level` is a Python logging level number (LogLevel's values). Thread-safe.
void write_log_line(int level, const std::string& logger_name, int64_t rank,
                    std::string_view message);

}  // namespace tracking
}  // namespace accel
