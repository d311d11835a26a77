#include <accel/parse_size.h>

#include <c10/util/Exception.h>

#include <cctype>
#include <regex>

namespace accel {

int64_t parse_size(const std::string& text) {
  static const std::regex pattern(R"(\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|[KMGT]b|B)?\s*)",
                                  std::regex::icase);
  std::smatch match;
  TORCH_CHECK(std::regex_match(text, match, pattern), "accel: invalid size '", text,
              "' (expected a number of bytes or a size such as 10GB, 100MB, 2GiB)");
  const double number = std::stod(match[1].str());
  std::string unit = match[2].str();
  double factor = 1;
  if (!unit.empty() && unit != "B" && unit != "b") {
    const char prefix = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    const int power = prefix == 'K' ? 1 : prefix == 'M' ? 2 : prefix == 'G' ? 3 : 4;
    const bool binary = unit.size() == 3;  // KiB, MiB, GiB, TiB
    const bool bits = unit.size() == 2 && unit[1] == 'b';
    for (int i = 0; i < power; ++i) factor *= binary ? 1024 : 1000;
    if (bits) factor /= 8;
  }
  return static_cast<int64_t>(number * factor);
}

}  // namespace accel
