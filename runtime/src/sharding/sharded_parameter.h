#pragma once

// Parameters whose values are not held by this process (FULL_SHARD, ZeRO-3), served to the
// operators that use them by a dispatcher fallback.
//
// LibTorch modules have no forward hooks, so a unit's all-gather cannot be started "before its
// forward" by accel. The parameters carry the mechanism instead, as offloaded weights do
// (offload.h): a sharded parameter keeps its shape, dtype, device, requires_grad and autograd
// identity, but has no storage of its own; its dispatch key set includes kShardedDispatchKey,
// which sits below autograd. So autograd records every operator on it as usual (the parameter is
// a leaf, and its gradient is accumulated into its .grad()), and below autograd the fallback:
//
// - gives an operator that only aliases it (t(), view(), transpose(), detach(), ...) or casts it
//   (_to_copy, as autocast does) a *lazy result*: another storage-less tensor that remembers
//   the operator. Autograd saves these for backward, so what forward saves costs no memory; a
//   cast of the parameter itself is served by gather_as, which gathers in the cast's dtype;
// - for any other operator, replaces every such tensor by its value (the parameter's source
//   gathers it: an all-gather of its unit), runs the operator, and lets the value go;
// - for copy_() into a parameter, hands the new value to the source (each process keeps its
//   part); other in-place operators on a parameter run on its value, which is then handed back.
//
// Backward's formulas use the saved lazy results, so the units are gathered again there, in
// backward's order: ZeRO-3's "gather before forward and before backward, free after", driven
// by the operators themselves. Every process must run the same operators on sharded parameters
// in the same order (a gather is a collective), as with PyTorch's FSDP.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <utility>

namespace accel {
namespace sharding {

/// Where a sharded parameter's value is.
class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  /// The parameter's whole value. Collective: every process calls it in the same order.
  virtual at::Tensor gather() = 0;
  /// The parameter's whole value cast to `dtype` (collective), as autocast asks for it. A source
  /// may gather the cast shards instead, moving fewer bytes for the same bits (a cast is
  /// elementwise); this one casts the gathered value.
  virtual at::Tensor gather_as(c10::ScalarType dtype) { return gather().to(dtype); }
  /// Makes `value` (the parameter's shape) its value; each process keeps its own part.
  virtual void assign(const at::Tensor& value) = 0;
  /// The parameter's elements (flattened) this process keeps: {first, count}, count 0 for none.
  virtual std::pair<int64_t, int64_t> kept_elements() const = 0;
  /// Writes `values` into this process's part: the kept elements [from, from + values.numel())
  /// counted from the first kept one (flattened, as kept_elements() says), so a caller can fill
  /// the part a piece at a time. Not collective.
  virtual void assign_kept(const at::Tensor& values, int64_t from) = 0;
};

/// Turns `parameter` (every handle to it: the module's registered entry and its member alike)
/// into a sharded parameter on `device` (the parameter's, or the one a meta parameter's shards
/// are on) whose value `source` holds.
void shard_in_place(const at::Tensor& parameter, std::shared_ptr<ParameterSource> source,
                    c10::Device device);

/// The source of a sharded parameter; null for any other tensor (a lazy result included).
ParameterSource* source_of(const at::Tensor& tensor);

/// True for a sharded parameter and for the lazy results of operators on one.
bool is_sharded(const at::Tensor& tensor);

/// The value of a sharded parameter or lazy result (collective); `tensor` itself otherwise.
at::Tensor gathered_value(const at::Tensor& tensor);

}  // namespace sharding
}  // namespace accel
