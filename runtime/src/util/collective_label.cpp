#include "collective_label.h"

#include <array>
#include <atomic>
#include <cstring>

namespace accel {
namespace util {
namespace {

struct OpenScope {
  const char* call;
  int64_t index;
  int64_t issued;  // collectives issued inside it so far
};

constexpr size_t kMaxDepth = 8;
thread_local std::array<OpenScope, kMaxDepth> open_scopes;
thread_local size_t depth = 0;
// The outermost scope of the thread that opened one last, for collectives issued on threads with
// none (the autograd engine's device threads call the Reducer's hooks).
std::atomic<const char*> outermost_elsewhere{nullptr};

std::string scope_text(const OpenScope& scope) {
  std::string text = scope.call;
  if (scope.index >= 0) text += " " + std::to_string(scope.index);
  return text;
}

}  // namespace

CollectiveLabel::CollectiveLabel(const char* call, int64_t index) {
  if (depth == 0) outermost_elsewhere.store(call, std::memory_order_relaxed);
  if (depth < kMaxDepth) open_scopes[depth] = OpenScope{call, index, 0};
  ++depth;
}

CollectiveLabel::~CollectiveLabel() {
  --depth;
  if (depth == 0) outermost_elsewhere.store(nullptr, std::memory_order_relaxed);
}

std::string describe_collective_call(const char* op) {
  if (depth == 0) {
    const char* elsewhere = outermost_elsewhere.load(std::memory_order_relaxed);
    if (elsewhere == nullptr) return std::string(op) + " (no accel call)";
    return std::string(elsewhere) + ", " + op + " (on another thread)";
  }
  const size_t shown = depth < kMaxDepth ? depth : kMaxDepth;
  std::string text;
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) text += " > ";
    text += scope_text(open_scopes[i]);
  }
  OpenScope& innermost = open_scopes[shown - 1];
  const int64_t number = innermost.issued++;
  // The Reducer's all-reduces inside backward are its gradient buckets, in the order they fill.
  if (std::strcmp(innermost.call, "backward") == 0 && std::strcmp(op, "allreduce") == 0)
    return text + ", gradient bucket " + std::to_string(number);
  return text + ", " + op + (number > 0 ? " " + std::to_string(number + 1) : std::string());
}

}  // namespace util
}  // namespace accel
