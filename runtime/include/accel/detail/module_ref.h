#pragma once

// The module behind whatever a user holds a model by: a ModuleHolder (torch::nn::Linear, a
// TORCH_MODULE type), a shared_ptr or unique_ptr to a module, a raw pointer (`new ConvNet`) to a
// module or a holder, or the module itself. Every API that takes "a model" (prepare, accumulate,
// no_sync, forward, save_model, load_checkpoint_and_dispatch, init_empty_weights) reaches it
// through module_ref, so the forms are spelled out once.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <c10/util/Exception.h>

#include <memory>
#include <type_traits>
#include <utility>

namespace accel {
namespace detail {

/// The module itself, with its own type (`LinearImpl&` for a `torch::nn::Linear`), so that its
/// `forward` can be called; it converts to `torch::nn::Module&`.
template <typename M>
M& module_ref(const torch::nn::ModuleHolder<M>& model) {
  TORCH_CHECK(!model.is_empty(), "accel: the model is empty (a holder constructed from nullptr)");
  return *model.ptr();
}
template <typename M, typename = std::enable_if_t<std::is_base_of_v<torch::nn::Module, M>>>
M& module_ref(const std::shared_ptr<M>& model) {
  TORCH_CHECK(model != nullptr, "accel: the model is an empty pointer");
  return *model;
}
template <typename M, typename = std::enable_if_t<std::is_base_of_v<torch::nn::Module, M>>>
M& module_ref(const std::unique_ptr<M>& model) {
  TORCH_CHECK(model != nullptr, "accel: the model is an empty pointer");
  return *model;
}
template <typename M, typename = std::enable_if_t<std::is_base_of_v<torch::nn::Module, M>>>
M& module_ref(M& model) {
  return model;
}
/// A raw pointer to a module or to a holder, as a program that builds its model with `new` has.
template <typename M>
auto module_ref(M* model) -> decltype(module_ref(*model)) {
  TORCH_CHECK(model != nullptr, "accel: the model is a null pointer");
  return module_ref(*model);
}

/// True for the types module_ref accepts.
template <typename T, typename = void>
struct is_model : std::false_type {};
template <typename T>
struct is_model<T, std::void_t<decltype(module_ref(std::declval<T&>()))>> : std::true_type {};

}  // namespace detail
}  // namespace accel
