#pragma once

// The launcher's own lines on stderr ("accel launch: ..."), each in one write, so that the
// processes' output on the same stream never splits one.

#include <unistd.h>

#include <sstream>
#include <string>

namespace accel {
namespace launcher {

template <typename... Parts>
void say(const Parts&... parts) {
  std::ostringstream line;
  line << "accel launch: ";
  (line << ... << parts);
  line << '\n';
  const std::string text = line.str();
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, text.data(), text.size());
}

}  // namespace launcher
}  // namespace accel
