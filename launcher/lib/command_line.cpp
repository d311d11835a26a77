#include "command_line.h"

#include <algorithm>
#include <numeric>

namespace accel {
namespace launcher {
namespace {

// '-' and '_' are one letter here: `--max-restarts` is `--max_restarts` as Accelerate's users
// type it.
char fold(char c) { return c == '-' ? '_' : c; }

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const size_t substitute = diagonal + (fold(a[i - 1]) == fold(b[j - 1]) ? 0 : 1);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::optional<std::string> nearest_option(const std::string& unknown,
                                          const std::vector<std::string>& known) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(1, unknown.size() / 3) + 1;
  for (const auto& option : known) {
    const size_t distance = edit_distance(unknown, option);
    if (distance < best_distance) {
      best = option;
      best_distance = distance;
    }
  }
  return best;
}

std::string unknown_option_message(const std::string& argument,
                                   const std::vector<std::string>& known) {
  const std::string option = argument.substr(0, argument.find('='));
  std::string message = "unknown option '" + option + "'";
  if (auto meant = nearest_option(option, known)) {
    message += "; did you mean " + *meant + "?";
  } else {
    message += " (options come before the program; --help lists them)";
  }
  return message;
}

}  // namespace launcher
}  // namespace accel
