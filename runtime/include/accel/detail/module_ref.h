#pragma once

// The torch::nn::Module behind whatever a user holds a model by: a ModuleHolder (torch::nn::Linear,
// a TORCH_MODULE type), a shared_ptr to a module, or the module itself.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>

namespace accel {
namespace detail {

template <typename M>
torch::nn::Module& module_ref(torch::nn::ModuleHolder<M>& model) {
  return *model.ptr();
}
template <typename M>
torch::nn::Module& module_ref(const std::shared_ptr<M>& model) {
  return *model;
}
inline torch::nn::Module& module_ref(torch::nn::Module& model) { return model; }

}  // namespace detail
}  // namespace accel
