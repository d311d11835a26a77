#pragma once

// Storage-less tensors and the dispatcher fallback that serves them: offloaded weights (read to
// the execution device by each operator that uses them) and tensor factories routed to the meta
// device while an empty model is built. See dispatch.h for the design.

#include "util/positional_file.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Device.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace accel {
namespace big_model {

/// Where an offloaded weight's bytes are: a range of a file (the checkpoint, or a converted copy
/// in the offload folder), or a tensor held in memory on a device other than the executing one.
struct OffloadedWeight {
  std::string name;
  std::vector<int64_t> sizes;
  c10::ScalarType dtype = c10::ScalarType::Float;  // what operators receive
  c10::Device execution_device = c10::kCPU;
  std::shared_ptr<const util::PositionalFile> file;  // on disk ...
  uint64_t offset = 0;
  c10::ScalarType stored_dtype = c10::ScalarType::Float;
  at::Tensor held;  // ... or in memory elsewhere
};

/// Turns `tensor` (every handle to it: the module's registered entry and its member alike) into
/// an offloaded weight.
void offload_in_place(const at::Tensor& tensor, OffloadedWeight weight);

/// Turns `tensor` into a meta tensor of its shape and dtype, keeping its requires_grad.
void empty_in_place(const at::Tensor& tensor);

/// Makes every handle to `tensor` refer to `value`'s storage, device, dtype and shape.
void assign_in_place(const at::Tensor& tensor, const at::Tensor& value);

/// While alive on this thread, every tensor factory called at the top level (an operator with no
/// tensor argument) is numbered in call order, and those for which `to_meta(number)` is true
/// produce meta tensors (factories with a device argument), except small ones (up to 4096
/// elements), which are made for real so that constructors writing into them directly
/// (torch::tensor({...})) work; emptying the module's tensors afterwards is the caller's part.
/// Operators called inside other operators are not counted.
class FactoryRouter {
 public:
  explicit FactoryRouter(std::function<bool(int64_t)> to_meta, bool remember_results);
  ~FactoryRouter();
  FactoryRouter(const FactoryRouter&) = delete;
  FactoryRouter& operator=(const FactoryRouter&) = delete;

  /// The number of the factory call that produced `tensor`; -1 when none (or not remembered).
  int64_t call_that_made(const at::Tensor& tensor) const;

  // Used by the fallback.
  void route(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);

 private:
  std::function<bool(int64_t)> to_meta_;
  bool remember_results_;
  int64_t calls_ = 0;
  std::unordered_map<const void*, std::pair<int64_t, c10::weak_intrusive_ptr<c10::TensorImpl>>>
      results_;
  FactoryRouter* previous_;
  c10::impl::IncludeDispatchKeyGuard route_factories_;
};

}  // namespace big_model
}  // namespace accel
