#include <accel/memory.h>

#ifdef ACCEL_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <cstring>
#include <new>

namespace accel {
namespace detail {

bool is_out_of_memory(const std::exception& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr) return true;
  if (dynamic_cast<const std::bad_alloc*>(&error) != nullptr) return true;
  // What LibTorch's allocators and cuDNN say when memory runs out (Accelerate's list).
  const char* message = error.what();
  for (const char* statement :
       {" out of memory", "CUDNN_STATUS_NOT_SUPPORTED", "CUDNN_STATUS_ALLOC_FAILED",
        "DefaultCPUAllocator: can't allocate memory"}) {
    if (std::strstr(message, statement) != nullptr) return true;
  }
  return false;
}

void release_cached_memory() {
#ifdef ACCEL_WITH_CUDA
  if (c10::cuda::device_count() > 0) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

}  // namespace detail
}  // namespace accel
