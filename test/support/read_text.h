#pragma once

// A whole file as text (what a test wrote, read back to check it).

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace accel_test {

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace accel_test
