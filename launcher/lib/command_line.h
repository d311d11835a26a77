#pragma once

// What `accel` says about a command line it cannot take: an unknown option, with the known one
// that was most likely meant.

#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

/// The option of `known` ("--max_restarts", ...) that `unknown` most likely misspells: the
/// nearest by edit distance, '-' and '_' alike, when it is near enough to be a typo (at most a
/// third of its length, and at least 1, away). None otherwise.
std::optional<std::string> nearest_option(const std::string& unknown,
                                          const std::vector<std::string>& known);

/// "unknown option '--max_restart'; did you mean --max_restarts?" (the suggestion only when
/// nearest_option finds one). `argument` may carry "=VALUE", which is left out.
std::string unknown_option_message(const std::string& argument,
                                   const std::vector<std::string>& known);

}  // namespace launcher
}  // namespace accel
