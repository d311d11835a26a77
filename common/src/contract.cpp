#include "accel_common/contract.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <system_error>

namespace accel {
namespace contract {

const std::vector<std::string>& mixed_precision_choices() {
  static const std::vector<std::string> choices{"no", "bf16", "fp16", "fp8"};
  return choices;
}

const std::vector<std::string>& state_dict_type_choices() {
  static const std::vector<std::string> choices = {"FULL_STATE_DICT", "SHARDED_STATE_DICT"};
  return choices;
}

const std::vector<std::string>& sharding_strategy_choices() {
  // SHARD_OPTIMIZER_STATE is DeepSpeed's ZeRO stage 1, which FSDP has no name for.
  static const std::vector<std::string> choices{"NO_SHARD", "SHARD_OPTIMIZER_STATE",
                                                "SHARD_GRAD_OP", "FULL_SHARD", "HYBRID_SHARD"};
  return choices;
}

const std::vector<std::string>& ddp_comm_hook_choices() {
  static const std::vector<std::string> choices{"no", "fp16", "bf16"};
  return choices;
}

const std::vector<std::string>& distributed_type_choices() {
  static const std::vector<std::string> choices{"NO", "MULTI_CPU", "MULTI_GPU"};
  return choices;
}

bool is_one_of(const std::string& value, const std::vector<std::string>& choices) {
  return std::find(choices.begin(), choices.end(), value) != choices.end();
}

std::optional<bool> parse_bool(const std::string& value) {
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
  return std::nullopt;
}

std::optional<int64_t> parse_integer(std::string_view text) {
  // from_chars takes no leading '+'; a second sign after it would then be read as the number's.
  if (!text.empty() && text.front() == '+') {
    text.remove_prefix(1);
    if (!text.empty() && text.front() == '-') return std::nullopt;
  }
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

std::optional<std::chrono::milliseconds> parse_seconds(std::string_view text) {
  const std::string whole(text);
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(whole, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  // stod skips leading spaces and reads "inf" and "nan": none of those is a duration here.
  if (used != whole.size() || whole.empty() || std::isspace(static_cast<unsigned char>(whole[0])) ||
      !(value > 0 && value < 1e9)) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(value * 1000));
}

std::string join(const std::vector<std::string>& choices) {
  std::string text;
  for (const auto& choice : choices) text += (text.empty() ? "" : ", ") + choice;
  return text;
}

}  // namespace contract
}  // namespace accel
