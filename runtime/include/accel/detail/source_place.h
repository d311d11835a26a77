#pragma once
// Where in the program something was made, filled in by the compiler at the call that uses the
// default argument: std::source_location before C++20 (`__builtin_FILE`, `__builtin_LINE`, which
// GCC and Clang both give the caller's place in a default argument).

namespace accel::detail {

struct SourcePlace {
  // Implicit: `SourcePlace place = {}` as a default argument is the caller's place.
  constexpr SourcePlace(const char* file = __builtin_FILE(), int line = __builtin_LINE())
      : file(file), line(line) {}
  const char* file;
  int line;
};

}  // namespace accel::detail
