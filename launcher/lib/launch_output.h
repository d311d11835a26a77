#pragma once

// The launcher's own lines on stderr ("accel launch: ..."), each in one write, so that the
// processes' output on the same stream never splits one.

#include <unistd.h>

#include <sstream>
#include <string>

namespace accel {
namespace launcher {

/// What every line of `accel launch`'s own begins with.
inline constexpr char kLaunchPrefix[] = "accel launch: ";

/// One line "accel launch: <parts>".
template <typename... Parts>
void say(const Parts&... parts) {
  std::ostringstream line;
  line << kLaunchPrefix;
  (line << ... << parts);
  line << '\n';
  const std::string text = line.str();
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, text.data(), text.size());
}

/// One line "accel launch: warning: <parts>".
template <typename... Parts>
void warn(const Parts&... parts) {
  say("warning: ", parts...);
}

}  // namespace launcher
}  // namespace accel
