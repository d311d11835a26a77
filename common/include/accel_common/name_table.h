#pragma once

// An enum's spellings as a table of (value, name) pairs, looked up both ways: for the choices
// parsed from text once (options, config files, the environment, the flight record) and written
// back as text. A value spelled more than one way lists its own name first: name_in returns the
// first, value_in accepts every one.

#include <optional>
#include <string_view>

namespace accel {

/// The name of `value` in `table` ("?" for a value the table lacks).
template <typename Table, typename Value>
const char* name_in(const Table& table, Value value) {
  for (const auto& [entry, name] : table) {
    if (entry == value) return name;
  }
  return "?";
}

/// The value `text` names in `table`; none for another text.
template <typename Value, typename Table>
std::optional<Value> value_in(const Table& table, std::string_view text) {
  for (const auto& [entry, name] : table) {
    if (text == name) return entry;
  }
  return std::nullopt;
}

}  // namespace accel
