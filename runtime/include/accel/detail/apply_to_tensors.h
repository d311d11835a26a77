#pragma once

// One walk over the containers a training program passes around (Accelerate's
// recursively_apply): gather, convert_to_fp32 and a loader's device placement all use it.

#include <torch/data/example.h>
#include <torch/types.h>

#include <map>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace accel {
namespace detail {

/// `value` with `fn` applied to every tensor in it: a tensor, or vectors, pairs, tuples, maps,
/// unordered maps and `torch::data::Example`s of them, nested to any depth. The result has the
/// same type and shape; other values pass through unchanged. `fn` takes and returns a tensor.
template <typename Fn>
torch::Tensor apply_to_tensors(torch::Tensor tensor, const Fn& fn) {
  return fn(tensor);
}
template <typename T, typename Fn>
T apply_to_tensors(T value, const Fn&) {
  return value;
}
template <typename T, typename Fn>
std::vector<T> apply_to_tensors(std::vector<T> values, const Fn& fn);
template <typename A, typename B, typename Fn>
std::pair<A, B> apply_to_tensors(std::pair<A, B> value, const Fn& fn);
template <typename... T, typename Fn>
std::tuple<T...> apply_to_tensors(std::tuple<T...> value, const Fn& fn);
template <typename K, typename V, typename Fn>
std::map<K, V> apply_to_tensors(std::map<K, V> values, const Fn& fn);
template <typename K, typename V, typename Fn>
std::unordered_map<K, V> apply_to_tensors(std::unordered_map<K, V> values, const Fn& fn);
template <typename Data, typename Target, typename Fn>
torch::data::Example<Data, Target> apply_to_tensors(torch::data::Example<Data, Target> example,
                                                    const Fn& fn);

template <typename T, typename Fn>
std::vector<T> apply_to_tensors(std::vector<T> values, const Fn& fn) {
  for (auto& value : values) value = apply_to_tensors(std::move(value), fn);
  return values;
}
template <typename A, typename B, typename Fn>
std::pair<A, B> apply_to_tensors(std::pair<A, B> value, const Fn& fn) {
  value.first = apply_to_tensors(std::move(value.first), fn);
  value.second = apply_to_tensors(std::move(value.second), fn);
  return value;
}
template <typename... T, typename Fn>
std::tuple<T...> apply_to_tensors(std::tuple<T...> value, const Fn& fn) {
  std::apply([&fn](T&... items) { ((items = apply_to_tensors(std::move(items), fn)), ...); },
             value);
  return value;
}
template <typename K, typename V, typename Fn>
std::map<K, V> apply_to_tensors(std::map<K, V> values, const Fn& fn) {
  for (auto& entry : values) entry.second = apply_to_tensors(std::move(entry.second), fn);
  return values;
}
template <typename K, typename V, typename Fn>
std::unordered_map<K, V> apply_to_tensors(std::unordered_map<K, V> values, const Fn& fn) {
  for (auto& entry : values) entry.second = apply_to_tensors(std::move(entry.second), fn);
  return values;
}
template <typename Data, typename Target, typename Fn>
torch::data::Example<Data, Target> apply_to_tensors(torch::data::Example<Data, Target> example,
                                                    const Fn& fn) {
  example.data = apply_to_tensors(std::move(example.data), fn);
  example.target = apply_to_tensors(std::move(example.target), fn);
  return example;
}
// An example without a target (TensorDataset's TensorExample) has no `target` member.
template <typename Data, typename Fn>
torch::data::Example<Data, torch::data::example::NoTarget> apply_to_tensors(
    torch::data::Example<Data, torch::data::example::NoTarget> example, const Fn& fn) {
  example.data = apply_to_tensors(std::move(example.data), fn);
  return example;
}

/// Whether every leaf of T is a tensor (so a collective over T's tensors loses nothing).
template <typename T>
struct holds_only_tensors : std::is_same<T, torch::Tensor> {};
template <typename T>
struct holds_only_tensors<std::vector<T>> : holds_only_tensors<T> {};
template <typename A, typename B>
struct holds_only_tensors<std::pair<A, B>>
    : std::bool_constant<holds_only_tensors<A>::value && holds_only_tensors<B>::value> {};
template <typename... T>
struct holds_only_tensors<std::tuple<T...>>
    : std::bool_constant<(holds_only_tensors<T>::value && ...)> {};
template <typename K, typename V>
struct holds_only_tensors<std::map<K, V>> : holds_only_tensors<V> {};
template <typename K, typename V>
struct holds_only_tensors<std::unordered_map<K, V>> : holds_only_tensors<V> {};
template <typename Data, typename Target>
struct holds_only_tensors<torch::data::Example<Data, Target>>
    : std::bool_constant<holds_only_tensors<Data>::value && holds_only_tensors<Target>::value> {};
template <typename Data>
struct holds_only_tensors<torch::data::Example<Data, torch::data::example::NoTarget>>
    : holds_only_tensors<Data> {};

}  // namespace detail
}  // namespace accel
