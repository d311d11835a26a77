// Proves the CPU's exact optimizer step against LibTorch's own, once per kind of update and
// process (see exact_step_check.h).

#include "exact_step_check.h"

#include "accel/detail/multi_tensor_step.h"
#include "exact_cpu_step.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

namespace accel {
namespace optim {
namespace {

enum class Kind { sgd, adam, adamw };

/// What decides which code an update runs: the optimizer, the dtype and the options that are on.
/// The options' values only scale it, so a proof holds for any values with the same flags
/// (a scheduler changing lr every step proves nothing new).
using UpdateKind = std::tuple<Kind, c10::ScalarType, unsigned>;

unsigned flags_of(const torch::optim::SGDOptions& o) {
  return (o.momentum() != 0) | (o.dampening() != 0) << 1 | (o.weight_decay() != 0) << 2 |
         o.nesterov() << 3;
}
template <typename Options>
unsigned adam_flags_of(const Options& o) {
  return (o.weight_decay() != 0) << 2 | o.amsgrad() << 4;
}

/// Probe tensors from a generator of our own (the program's torch random state stays untouched).
class ProbeValues {
 public:
  explicit ProbeValues(c10::ScalarType dtype) : dtype_(dtype) {}
  at::Tensor make(at::IntArrayRef shape) {
    auto out = at::empty(shape, at::TensorOptions().dtype(dtype_));
    if (dtype_ == c10::kFloat) {
      fill(out.data_ptr<float>(), out.numel());
    } else {
      fill(out.data_ptr<double>(), out.numel());
    }
    return out;
  }

 private:
  template <typename T>
  void fill(T* data, int64_t count) {
    for (int64_t i = 0; i < count; ++i) data[i] = static_cast<T>(normal_(generator_));
  }
  c10::ScalarType dtype_;
  std::mt19937_64 generator_{59};
  std::normal_distribution<double> normal_;
};

/// "" when `a` and `b` hold the same bytes, else where they first differ.
std::string byte_difference(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  if (!a.defined() && !b.defined()) return "";
  if (a.defined() != b.defined() || a.sizes() != b.sizes() || a.dtype() != b.dtype()) {
    return what + " differs in shape or dtype";
  }
  const auto left = a.contiguous(), right = b.contiguous();
  const auto* l = static_cast<const char*>(left.data_ptr());
  const auto* r = static_cast<const char*>(right.data_ptr());
  const size_t item = left.element_size();
  for (int64_t i = 0; i < left.numel(); ++i) {
    if (std::memcmp(l + i * item, r + i * item, item) != 0) {
      std::ostringstream out;
      out.precision(17);
      out << what << " element " << i << ": LibTorch " << left.view({-1})[i].item<double>()
          << ", the kernel " << right.view({-1})[i].item<double>();
      return out.str();
    }
  }
  return "";
}

std::string state_difference(const torch::optim::OptimizerParamState& a,
                             const torch::optim::OptimizerParamState& b, const std::string& what) {
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&a)) {
    const auto& other = static_cast<const torch::optim::SGDParamState&>(b);
    return byte_difference(sgd->momentum_buffer(), other.momentum_buffer(), what + " momentum");
  }
  auto adam_like = [&](const auto& x, const auto& y) -> std::string {
    if (x.step() != y.step()) return what + " step count";
    for (const auto& d :
         {byte_difference(x.exp_avg(), y.exp_avg(), what + " exp_avg"),
          byte_difference(x.exp_avg_sq(), y.exp_avg_sq(), what + " exp_avg_sq"),
          byte_difference(x.max_exp_avg_sq(), y.max_exp_avg_sq(), what + " max_exp_avg_sq")}) {
      if (!d.empty()) return d;
    }
    return "";
  };
  if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(&a)) {
    return adam_like(*adam, static_cast<const torch::optim::AdamParamState&>(b));
  }
  return adam_like(static_cast<const torch::optim::AdamWParamState&>(a),
                   static_cast<const torch::optim::AdamWParamState&>(b));
}

/// Three steps of LibTorch's optimizer and of the kernels from the same start, on shapes with
/// vector bodies and scalar tails (1, 7, 1031 elements) and a strided gradient (a transposed
/// 33 x 17); "" when parameters and state agree byte for byte.
template <typename O, typename Options>
std::string prove(Options options, c10::ScalarType dtype) {
  if (!aten_rounding(dtype)) {
    return "ATen's add and addcmul round neither as its vectorized kernels nor as its DEFAULT "
           "ones do here";
  }
  if (options.lr() == 0) options.lr(1e-2);  // a step that changes nothing proves nothing
  const std::vector<std::vector<int64_t>> shapes = {{1}, {7}, {1031}, {33, 17}};
  ProbeValues values(dtype);
  std::vector<at::Tensor> reference, candidate;
  for (const auto& shape : shapes) {
    auto start = values.make(shape);
    reference.push_back(start.clone().requires_grad_(true));
    candidate.push_back(start.clone().requires_grad_(true));
  }
  O libtorch(reference, options);
  O kernel(candidate, options);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      auto grad = shapes[i].size() == 2 ? values.make({shapes[i][1], shapes[i][0]}).t()
                                        : values.make(shapes[i]);
      reference[i].mutable_grad() = grad;
      candidate[i].mutable_grad() = grad.clone();
    }
    libtorch.step();
    detail::multi_tensor_step(kernel, detail::StepKernel::fused);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string what = "step 3, probe parameter " + std::to_string(i);
    auto difference = byte_difference(reference[i], candidate[i], what);
    const auto& expected = libtorch.state();
    const auto& got = kernel.state();
    const auto mine = expected.find(reference[i].unsafeGetTensorImpl());
    const auto theirs = got.find(candidate[i].unsafeGetTensorImpl());
    if (difference.empty() && (mine == expected.end()) != (theirs == got.end())) {
      difference = what + ": state made by one step and not the other";
    } else if (difference.empty() && mine != expected.end()) {
      difference = state_difference(*mine->second, *theirs->second, what);
    }
    if (!difference.empty()) return difference;
  }
  return "";
}

/// The verdict for one kind: "" when proven, else why not. Proven once per process.
std::string verdict(const UpdateKind& kind, const std::function<std::string()>& proof) {
  static std::mutex mutex;
  static std::map<UpdateKind, std::string> verdicts;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = verdicts.find(kind);
  if (found == verdicts.end()) found = verdicts.emplace(kind, proof()).first;
  return found->second;
}

std::string group_refusal(const torch::optim::Optimizer& optimizer,
                          const torch::optim::OptimizerParamGroup& group) {
  std::set<c10::ScalarType> dtypes;
  for (const auto& param : group.params()) {
    if (param.device().is_cpu()) dtypes.insert(param.scalar_type());
  }
  for (const auto dtype : dtypes) {
    if (!exact_cpu_dtype(dtype)) return "parameters of dtype " + std::string(c10::toString(dtype));
    std::string refusal;
    if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      refusal = verdict({Kind::sgd, dtype, flags_of(o)},
                        [&] { return prove<torch::optim::SGD>(o, dtype); });
    } else if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) {
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
      refusal = verdict({Kind::adamw, dtype, adam_flags_of(o)},
                        [&] { return prove<torch::optim::AdamW>(o, dtype); });
    } else if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) {
      const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
      refusal = verdict({Kind::adam, dtype, adam_flags_of(o)},
                        [&] { return prove<torch::optim::Adam>(o, dtype); });
    } else {
      return "an optimizer other than SGD, Adam and AdamW";
    }
    if (!refusal.empty()) return refusal;
  }
  return "";
}

}  // namespace

std::string exact_cpu_step_refusal(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    auto refusal = group_refusal(optimizer, group);
    if (!refusal.empty()) return refusal;
  }
  return "";
}

bool exact_cpu_step_proven(const torch::optim::Optimizer& optimizer) {
  return exact_cpu_step_refusal(optimizer).empty();
}

}  // namespace optim
}  // namespace accel
