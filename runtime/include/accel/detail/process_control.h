#pragma once

// What an Accelerator offers for running code on some processes and splitting work between
// them, written once over the process identity (Accelerate's PartialState methods).

#include <accel/operations.h>

#include <c10/util/Exception.h>

#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

namespace accel {
namespace detail {

/// Accelerator derives from ProcessControl<Accelerator>: these methods use its process_index(),
/// num_processes(), their local forms, and its RAII main_process_first() and
/// local_main_process_first().
template <typename Derived>
class ProcessControl {
 public:
  /// This process's contiguous share of `values` (17 items on 2 processes: 9 and 8); with
  /// `apply_padding` every share has the largest size, its last element repeated (a process
  /// left no element, with fewer elements than processes, repeats the last of all).
  template <typename T>
  std::vector<T> split_between_processes(const std::vector<T>& values,
                                         bool apply_padding = false) const {
    auto range =
        split_range(values.size(), self().num_processes(), self().process_index(), apply_padding);
    std::vector<T> out(values.begin() + range.begin, values.begin() + range.end);
    while (apply_padding && !values.empty() && out.size() < range.padded_size) {
      out.push_back(out.empty() ? values.back() : out.back());
    }
    return out;
  }
  /// Each value of `values` split as it would be alone.
  template <typename K, typename V>
  std::map<K, V> split_between_processes(const std::map<K, V>& values,
                                         bool apply_padding = false) const {
    std::map<K, V> out;
    for (const auto& entry : values) {
      out.emplace(entry.first, self().split_between_processes(entry.second, apply_padding));
    }
    return out;
  }
  /// Runs `fn` on the main process first, then on the others.
  template <typename Fn>
  void main_process_first(Fn&& fn) {
    auto guard = self().main_process_first();
    std::forward<Fn>(fn)();
  }
  /// Runs `fn` on each machine's local main process first, then on the others.
  template <typename Fn>
  void local_main_process_first(Fn&& fn) {
    auto guard = self().local_main_process_first();
    std::forward<Fn>(fn)();
  }
  /// Runs `fn` on the main process only.
  template <typename Fn>
  void on_main_process(Fn&& fn) {
    if (self().is_main_process()) std::forward<Fn>(fn)();
  }
  /// Runs `fn` on each machine's local main process only.
  template <typename Fn>
  void on_local_main_process(Fn&& fn) {
    if (self().is_local_main_process()) std::forward<Fn>(fn)();
  }
  /// Runs `fn` on the last process only.
  template <typename Fn>
  void on_last_process(Fn&& fn) {
    if (self().is_last_process()) std::forward<Fn>(fn)();
  }
  /// Runs `fn` on process `index` only; an index not in the job is an error.
  template <typename Fn>
  void on_process(int64_t index, Fn&& fn) {
    check_process_index(index, self().num_processes(), "on_process");
    if (self().process_index() == index) std::forward<Fn>(fn)();
  }
  /// Runs `fn` on the process of local index `index` on each machine only.
  template <typename Fn>
  void on_local_process(int64_t index, Fn&& fn) {
    check_process_index(index, self().local_num_processes(), "on_local_process");
    if (self().local_process_index() == index) std::forward<Fn>(fn)();
  }
  /// Writes the arguments (as `operator<<` does) and a newline on the main process only.
  template <typename... Args>
  void print(const Args&... args) {
    if (!self().is_main_process()) return;
    std::ostringstream line;
    (void)std::initializer_list<int>{((line << args), 0)...};
    line << '\n';
    std::cout << line.str() << std::flush;
  }

 protected:
  ProcessControl() = default;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  const Derived& self() const { return static_cast<const Derived&>(*this); }
  static void check_process_index(int64_t index, int64_t count, const char* method) {
    TORCH_CHECK(index >= 0 && index < count, "accel: ", method, "(", index,
                "): this job has processes 0 to ", count - 1);
  }
};

}  // namespace detail
}  // namespace accel
