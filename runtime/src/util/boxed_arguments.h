#pragma once

// Walking the tensors among a boxed operator call's arguments, for the dispatcher fallbacks
// (offload.cpp, sharded_parameter.cpp).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace accel {
namespace util {

/// Calls `visit(tensor)` on every tensor among `values[first..]` (plain, in tensor lists, in
/// lists of optional tensors); where it returns true, the tensor it left is put in place.
template <typename Visit>
void for_each_tensor_in(std::vector<c10::IValue>& values, size_t first, Visit visit) {
  for (size_t i = first; i < values.size(); ++i) {
    c10::IValue& value = values[i];
    if (value.isTensor()) {
      at::Tensor tensor = value.toTensor();
      if (visit(tensor)) value = std::move(tensor);
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        at::Tensor tensor = list.get(k);
        if (visit(tensor)) list.set(k, std::move(tensor));
      }
    } else if (value.isList()) {
      auto list = value.toList();
      for (size_t k = 0; k < list.size(); ++k) {
        c10::IValue element = list.get(k);
        if (!element.isTensor()) continue;
        at::Tensor tensor = element.toTensor();
        if (visit(tensor)) list.set(k, c10::IValue(std::move(tensor)));
      }
    }
  }
}

/// The same over the arguments of `op` at the top of `stack`.
template <typename Visit>
void for_each_tensor_argument(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack,
                              Visit visit) {
  for_each_tensor_in(*stack, stack->size() - op.schema().arguments().size(), std::move(visit));
}

}  // namespace util
}  // namespace accel
