// The LibTorch internals torch_compat.h reaches by symbol rather than by header.

#include "torch_compat.h"

// MKL's vector square roots, as libtorch_cpu exports them on an MKL build. Weak: a LibTorch
// without MKL leaves them null, and the callers take ATen's sqrt op instead.
extern "C" {
__attribute__((weak)) void vmsSqrt(long long n, const float* in, float* out, long long mode);
__attribute__((weak)) void vmdSqrt(long long n, const double* in, double* out, long long mode);
}

namespace accel {
namespace util {

VmlSqrtFloat mkl_vml_sqrt_float() { return &vmsSqrt; }
VmlSqrtDouble mkl_vml_sqrt_double() { return &vmdSqrt; }

}  // namespace util
}  // namespace accel
