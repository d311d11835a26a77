#pragma once

// Whether this thread is inside an FP8 scope: converted Linears compute in FP8 there
// (fp8_kernels.cpp). AutocastGuard opens one under mixed_precision "fp8"; accel::checkpoint
// keeps the state its block ran under for the recompute.

namespace accel {
namespace precision {

bool fp8_scope_open();
/// Opens or closes the scope on this thread (registering the kernels on first use).
void set_fp8_scope(bool open);

}  // namespace precision
}  // namespace accel
