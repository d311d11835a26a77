#pragma once

// What an Accelerator offers for collectives over containers, numbers and other values, written
// once over its tensor collectives (Accelerate's accelerate.utils.operations).

#include <accel/detail/apply_to_tensors.h>
#include <accel/operations.h>

#include <ATen/core/ivalue.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace accel {
namespace detail {

/// Which processes a gather reaches: every process, or one of each data rank (gather_for_metrics
/// on a device mesh, whose tp and cp processes hold the same samples).
enum class GatherOver { all_processes, data_ranks };

/// Accelerator derives from CollectiveMethods<Accelerator>: these methods use its gather(tensor),
/// gather_together, reduce_number, all_gather_ivalue, broadcast_ivalue and its truncation of a
/// gathered last batch.
template <typename Derived>
class CollectiveMethods {
 public:
  /// gather() of every tensor in vectors, pairs, tuples and maps of tensors, nested; the result
  /// has the same shape.
  template <typename T>
  T gather(const T& tensors) {
    static_assert(holds_only_tensors<T>::value,
                  "gather() takes tensors and containers of tensors; gather_object() takes other "
                  "values");
    return apply_to_tensors(tensors, [this](const torch::Tensor& t) { return self().gather(t); });
  }

  /// gather() for evaluation: on the last batch of a prepared loader, drops the samples that
  /// even_batches duplicated, so every sample is counted once. Non-tensor vectors are gathered as
  /// objects. With several arguments, returns a tuple.
  template <typename T>
  T gather_for_metrics(const T& value) {
    if constexpr (std::is_same_v<T, torch::Tensor>) {
      return self().gather_for_metrics(value, /*use_gather_object=*/false);
    } else {
      auto gathered = objects_over(value, GatherOver::data_ranks);
      const int64_t keep = self().remainder_to_keep();
      if (keep >= 0 && static_cast<size_t>(keep) < gathered.size()) gathered.resize(keep);
      return gathered;
    }
  }
  /// Tensors go in one all-gather together (an evaluation batch's outputs and targets cost one
  /// collective, not one each); other values are gathered one by one.
  template <typename T, typename U, typename... Rest>
  std::tuple<T, U, Rest...> gather_for_metrics(const T& first, const U& second,
                                               const Rest&... rest) {
    if constexpr (std::is_same_v<T, torch::Tensor> && std::is_same_v<U, torch::Tensor> &&
                  (std::is_same_v<Rest, torch::Tensor> && ...)) {
      auto gathered = self().gather_together({first, second, rest...}, GatherOver::data_ranks);
      for (auto& tensor : gathered) tensor = self().truncate_to_remainder(std::move(tensor));
      return tuple_of(gathered, std::make_index_sequence<2 + sizeof...(Rest)>());
    } else {
      return std::tuple<T, U, Rest...>(gather_for_metrics(first), gather_for_metrics(second),
                                       gather_for_metrics(rest)...);
    }
  }

  /// One value from every process, in rank order. T must convert to and from `c10::IValue`
  /// (numbers, strings, tensors, and vectors, tuples and dicts of them).
  template <typename T>
  std::vector<T> gather_object(const T& value) {
    return objects_over(value, GatherOver::all_processes);
  }
  /// Every process's list, concatenated in rank order.
  template <typename T>
  std::vector<T> gather_object(const std::vector<T>& values) {
    return objects_over(values, GatherOver::all_processes);
  }

  /// Reduces a number across processes: a running loss or a count of correct predictions summed
  /// over every process's share of the data. Integers stay exact; Mean of integers rounds down.
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  T reduce(T value, Reduction reduction = Reduction::Sum) {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(self().reduce_number(static_cast<double>(value), reduction));
    } else {
      return static_cast<T>(self().reduce_number(static_cast<int64_t>(value), reduction));
    }
  }

  /// Process `from`'s value on every process.
  template <typename T>
  T broadcast_object(const T& value, int64_t from = 0) {
    return self().broadcast_ivalue(c10::IValue(value), from).template to<T>();
  }

  /// pad_across_processes with the padding's settings in order; PadOptions names them.
  [[deprecated(
      "use pad_across_processes(tensor, PadOptions().dim(...).pad_index(...))")]] torch::Tensor
  pad_across_processes(const torch::Tensor& tensor, int64_t dim, double pad_index = 0,
                       bool pad_first = false) {
    return self().pad_across_processes(
        tensor, PadOptions().dim(dim).pad_index(pad_index).pad_first(pad_first));
  }

 protected:
  CollectiveMethods() = default;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }

  /// gather_object over the processes `over` names.
  template <typename T>
  std::vector<T> objects_over(const T& value, GatherOver over) {
    std::vector<T> out;
    for (auto& v : self().all_gather_ivalue(c10::IValue(value), over)) {
      out.push_back(std::move(v).template to<T>());
    }
    return out;
  }
  template <typename T>
  std::vector<T> objects_over(const std::vector<T>& values, GatherOver over) {
    std::vector<T> out;
    for (auto& v : self().all_gather_ivalue(c10::IValue(values), over)) {
      auto part = std::move(v).template to<std::vector<T>>();
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }
  template <size_t... I>
  static auto tuple_of(std::vector<torch::Tensor>& tensors, std::index_sequence<I...>) {
    return std::make_tuple(std::move(tensors[I])...);
  }
};

}  // namespace detail
}  // namespace accel
