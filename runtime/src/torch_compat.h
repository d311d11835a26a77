#pragma once

// Every LibTorch-version-specific piece of libaccel lives here. (The 2.x branches follow the 2.x
// headers; this project's CI has LibTorch 1.13 only.)
//
// - c10d: in 1.13 ProcessGroupGloo and ProcessGroupNCCL are ProcessGroups; in 2.x they are Backends
//   that a ProcessGroup dispatches to.
// - autocast: 1.13 has one setter per device type (set_cpu_enabled, set_autocast_gpu_dtype);
//   2.4 takes the device type as an argument and deprecates the old names.
// - loss scaling: the fused unscale-and-check kernel has a CPU implementation from 2.3 on.

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace accel {
namespace detail {

inline c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::shared_ptr<::gloo::transport::Device> device, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = timeout;
  options->devices.push_back(std::move(device));
#if TORCH_VERSION_MAJOR >= 2
  auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
  return group;
#else
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
#endif
}

#ifdef USE_C10D_NCCL
inline c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
#if TORCH_VERSION_MAJOR >= 2
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
  group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, backend);
  return group;
#else
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#endif
}
#endif

// ---- autocast ------------------------------------------------------------------------------------

#define ACCEL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

inline bool autocast_enabled(c10::DeviceType device_type) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device_type);
#else
  return device_type == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                              : at::autocast::is_cpu_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device_type, bool enabled) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device_type, enabled);
#else
  if (device_type == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

inline c10::ScalarType autocast_dtype(c10::DeviceType device_type) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device_type);
#else
  return device_type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                              : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType device_type, c10::ScalarType dtype) {
#if ACCEL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device_type, dtype);
#else
  if (device_type == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

/// Lower-precision dtypes autocast supports on `device_type` in this LibTorch.
inline bool autocast_supports(c10::DeviceType device_type, c10::ScalarType dtype) {
  if (device_type == c10::DeviceType::CUDA) {
    return dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
  }
#if ACCEL_TORCH_AT_LEAST(2, 3)
  return dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
#else
  return device_type == c10::DeviceType::CPU && dtype == c10::ScalarType::BFloat16;
#endif
}

// ---- loss scaling --------------------------------------------------------------------------------

/// Whether at::_amp_foreach_non_finite_check_and_unscale_ has a kernel for `device_type`.
inline bool fused_unscale_available(c10::DeviceType device_type) {
#if ACCEL_TORCH_AT_LEAST(2, 3)
  return device_type == c10::DeviceType::CUDA || device_type == c10::DeviceType::CPU;
#else
  return device_type == c10::DeviceType::CUDA;
#endif
}

// The dispatch key offloaded weights carry and tensor factories are routed through while an
// empty model is built (offload.cpp). A mode key above autograd, so the fallback sees whole
// operators before any decomposition; DeferredInit is reserved for torchdistX's deferred
// initialisation, the same kind of use, and exists from 1.13 through 2.x.
constexpr c10::DispatchKey kOffloadDispatchKey = c10::DispatchKey::DeferredInit;

}  // namespace detail
}  // namespace accel
