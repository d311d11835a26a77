#pragma once

// libaccel's calls into LibTorch internals whose signatures change between releases: building
// c10d process groups and DDP's Reducer, autocast's thread state, which devices have the fused
// unscale kernel, and the dispatch keys offloaded and sharded tensors carry. accel supports
// LibTorch 2.6 and later (tested with 2.11, the pinned wheel); cmake/AccelFindTorch.cmake refuses
// older ones and picks C++20 from 2.14, whose headers refuse C++17. A new release that changes
// one of these is adapted here, behind the same functions.

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/autograd/graph_task.h>

#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 6)
#error "accel needs LibTorch 2.6 or later"
#endif

namespace accel {
namespace util {

// ---- c10d ---------------------------------------------------------------------------------------

inline c10::intrusive_ptr<c10d::Backend> make_gloo_backend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::shared_ptr<::gloo::transport::Device> device, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = timeout;
  options->devices.push_back(std::move(device));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

#ifdef USE_C10D_NCCL
inline c10::intrusive_ptr<c10d::Backend> make_nccl_backend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#endif

/// A process group that sends CPU tensors through `gloo` and, when `nccl` is given, CUDA tensors
/// through it (PyTorch's `cpu:gloo,cuda:nccl`). Its default backend (barriers, and tensors of any
/// other device) is NCCL when there is one.
inline c10::intrusive_ptr<c10d::ProcessGroup> make_process_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const c10::intrusive_ptr<c10d::Backend>& gloo,
    const c10::intrusive_ptr<c10d::Backend>& nccl = {}) {
  using BackendType = c10d::ProcessGroup::BackendType;
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  group->setBackend(c10::DeviceType::CPU, BackendType::GLOO, gloo);
  if (nccl) {
    group->setBackend(c10::DeviceType::CUDA, BackendType::NCCL, nccl);
    group->setDefaultBackend(BackendType::NCCL);
  } else {
    group->setDefaultBackend(BackendType::GLOO);
  }
  return group;
}

/// c10d's Reducer (DistributedDataParallel's engine) over `group`, with `buckets` of parameter
/// indices; rebuilt buckets are capped at `first_bucket_bytes` for the first, `bucket_bytes` after.
inline std::unique_ptr<c10d::Reducer> make_reducer(std::vector<at::Tensor> parameters,
                                                   std::vector<std::vector<size_t>> buckets,
                                                   c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                   int64_t bucket_bytes, int64_t first_bucket_bytes,
                                                   bool gradient_as_bucket_view) {
  const auto count = parameters.size();
  return std::make_unique<c10d::Reducer>(
      std::move(parameters), std::move(buckets), std::move(group),
      /*expect_sparse_gradients=*/std::vector<bool>(count, false), bucket_bytes,
      /*find_unused_parameters=*/false, gradient_as_bucket_view,
      /*param_names=*/std::unordered_map<size_t, std::string>{}, first_bucket_bytes,
      /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
      /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
}

// ---- autocast -----------------------------------------------------------------------------------

inline bool autocast_enabled(c10::DeviceType device_type) {
  return at::autocast::is_autocast_enabled(device_type);
}

inline void set_autocast_enabled(c10::DeviceType device_type, bool enabled) {
  at::autocast::set_autocast_enabled(device_type, enabled);
}

inline c10::ScalarType autocast_dtype(c10::DeviceType device_type) {
  return at::autocast::get_autocast_dtype(device_type);
}

inline void set_autocast_dtype(c10::DeviceType device_type, c10::ScalarType dtype) {
  at::autocast::set_autocast_dtype(device_type, dtype);
}

/// Lower-precision dtypes autocast supports on `device_type` in this LibTorch.
inline bool autocast_supports(c10::DeviceType device_type, c10::ScalarType dtype) {
  const bool device = device_type == c10::DeviceType::CUDA || device_type == c10::DeviceType::CPU;
  return device && (dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16);
}

// ---- autograd
// ------------------------------------------------------------------------------------

/// True on a thread that is running a backward pass (the engine's current graph task).
inline bool in_backward() { return torch::autograd::get_current_graph_task_id() != -1; }

// ---- loss scaling -------------------------------------------------------------------------------

/// Whether at::_amp_foreach_non_finite_check_and_unscale_ has a kernel for `device_type`.
inline bool fused_unscale_available(c10::DeviceType device_type) {
  return device_type == c10::DeviceType::CUDA || device_type == c10::DeviceType::CPU;
}

// The dispatch key offloaded weights carry and tensor factories are routed through while an
// empty model is built (offload.cpp). A mode key above autograd, so the fallback sees whole
// operators before any decomposition; DeferredInit is reserved for torchdistX's deferred
// initialisation, the same kind of use, and exists through 2.x.
constexpr c10::DispatchKey kOffloadDispatchKey = c10::DispatchKey::DeferredInit;

// The dispatch key sharded parameters carry (sharded_parameter.cpp). It must sit below autograd,
// so that autograd records operators on them as on any parameter, and be one that no kernel and
// no other fallback of LibTorch's C++ library is registered for, nor CompositeExplicitAutograd's
// kernels (which serve the backend keys, CustomRNGKeyId among them). Fake is the functionality
// key of Python's FakeTensor mode, unused by C++ programs; a process that also runs Python's
// FakeTensor mode cannot use FULL_SHARD.
constexpr c10::DispatchKey kShardedDispatchKey = c10::DispatchKey::Fake;

// The dispatch key tensor-parallel slices carry (parallel/tensor_parallel.h). It must sit above
// autocast and autograd, so that Linear's and Embedding's operators reach accel whole, with the
// activations, and have no kernel or fallback of LibTorch's C++ library. The functionality keys
// above autocast are functorch's and vmap's (which register fallbacks), DeferredInit
// (offload.cpp's), PythonTLSSnapshot (Python's) and TESTING_ONLY_GenericWrapper, which
// LibTorch registers nothing for outside its own dispatcher tests: that one. A process that
// also runs those tests cannot use tensor parallelism.
constexpr c10::DispatchKey kTensorParallelDispatchKey =
    c10::DispatchKey::TESTING_ONLY_GenericWrapper;

// The dispatch key accel's thread-local modes include in the thread's keys (precision/mode_key.h:
// FP8 Linears, a checkpointed block's matmuls recorded and replayed): above autograd, so that the
// matmuls reach accel before autograd records them, above autocast, so that a converted Linear's
// operators reach accel before autocast casts them, and above tensor parallelism's key.
// TESTING_ONLY_GenericMode is the thread-local twin of the key above, equally unused by LibTorch
// outside its dispatcher tests.
constexpr c10::DispatchKey kModeDispatchKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

// ---- Gloo --------------------------------------------------------------------------------------

/// gloo::IoException's type, the error Gloo's threads throw when a peer's connection is lost;
/// null where this LibTorch does not export it. The wheel ships no Gloo headers: libtorch_cpu
/// exports the type's typeinfo, which is read by its symbol.
const std::type_info* gloo_io_exception_type();

// ---- ATen's vector square root -----------------------------------------------------------------

/// ATen's CPU sqrt on an MKL build (the x86 wheels) is MKL's vector sqrt, vm{s,d}Sqrt in high
/// accuracy mode (ATen/cpu/vml.h), which libtorch_cpu exports: called here a small block at a
/// time it is ATen's result without the op's dispatch. Null where this LibTorch has
/// no MKL; exact_cpu_step.cpp also checks the results against at::sqrt before it trusts them. The
/// count is passed as 64 bits, right for MKL's LP64 (int, the low half) and ILP64 interfaces.
using VmlSqrtFloat = void (*)(long long n, const float* in, float* out, long long mode);
using VmlSqrtDouble = void (*)(long long n, const double* in, double* out, long long mode);
VmlSqrtFloat mkl_vml_sqrt_float();
VmlSqrtDouble mkl_vml_sqrt_double();
/// VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE, the mode ATen's vml.h passes.
constexpr long long kAtenVmlMode = 0x2 | 0x140000 | 0x100;

}  // namespace util
}  // namespace accel
