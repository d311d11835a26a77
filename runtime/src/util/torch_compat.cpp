// The LibTorch internals torch_compat.h reaches by symbol rather than by header.

#include "torch_compat.h"

// MKL's vector square roots, as libtorch_cpu exports them on an MKL build. Weak: a LibTorch
// without MKL leaves them null, and the callers take ATen's sqrt op instead.
extern "C" {
__attribute__((weak)) void vmsSqrt(long long n, const float* in, float* out, long long mode);
__attribute__((weak)) void vmdSqrt(long long n, const double* in, double* out, long long mode);
}

// gloo::IoException's typeinfo, by its mangled name (libtorch_cpu exports it, weak).
extern const std::type_info gloo_io_exception_typeinfo __asm__("_ZTIN4gloo11IoExceptionE")
    __attribute__((weak));

namespace accel {
namespace util {

VmlSqrtFloat mkl_vml_sqrt_float() { return &vmsSqrt; }
VmlSqrtDouble mkl_vml_sqrt_double() { return &vmdSqrt; }

const std::type_info* gloo_io_exception_type() { return &gloo_io_exception_typeinfo; }

}  // namespace util
}  // namespace accel
