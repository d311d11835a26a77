#pragma once

// Stand-in for a LibTorch header that Debian's libtorch-dev 1.13 does not install, although
// c10d/reducer.hpp includes it. reducer.hpp uses only the two names below: the GradCallback type
// and a shared_ptr to the context (a member whose layout does not depend on the pointee). The
// build adds this directory only when the real header is missing (runtime/CMakeLists.txt).

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
