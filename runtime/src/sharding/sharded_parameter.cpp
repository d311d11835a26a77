// Sharded parameters and the fallback that serves them: see sharded_parameter.h.

#include "sharded_parameter.h"

#include "parallel/tensor_parallel.h"
#include "util/boxed_arguments.h"
#include "util/dispatch_registration.h"
#include "util/torch_compat.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <optional>
#include <utility>
#include <vector>

namespace accel {
namespace sharding {
namespace {

/// What a storage-less tensor stands for: a parameter, or an operator's lazy result.
class Deferred {
 public:
  virtual ~Deferred() = default;
  /// The tensor's value (collective for a parameter: its unit is gathered).
  virtual at::Tensor value() const = 0;
  /// The value cast to `dtype`: what an autocast cast of this tensor gives.
  virtual at::Tensor value_as(c10::ScalarType dtype) const { return value().to(dtype); }
  /// The parameter's source; null for a lazy result.
  virtual ParameterSource* source() const { return nullptr; }
};

void delete_deferred(void* context) { delete static_cast<Deferred*>(context); }

const Deferred* deferred(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.key_set().has(util::kShardedDispatchKey) ||
      !tensor.has_storage()) {
    return nullptr;
  }
  const auto& data = tensor.storage().data_ptr();
  if (data.get_deleter() != &delete_deferred) return nullptr;
  return static_cast<const Deferred*>(data.get_context());
}

at::Tensor value_of(const at::Tensor& tensor) {
  const Deferred* d = deferred(tensor);
  return d == nullptr ? tensor : d->value();
}

class ShardedParameter final : public Deferred {
 public:
  explicit ShardedParameter(std::shared_ptr<ParameterSource> source) : source_(std::move(source)) {}
  at::Tensor value() const override { return source_->gather(); }
  at::Tensor value_as(c10::ScalarType dtype) const override { return source_->gather_as(dtype); }
  ParameterSource* source() const override { return source_.get(); }

 private:
  std::shared_ptr<ParameterSource> source_;
};

/// A storage-less tensor of `layout`'s sizes, strides and dtype on `device`, standing for
/// `what`. A tensor-parallel slice's (`of`'s) stays one: the result carries its key and is
/// registered with its slice, so Linear's operators still reach tensor parallelism's kernels.
at::Tensor make_deferred(std::unique_ptr<Deferred> what, const at::Tensor& layout,
                         c10::Device device, const at::Tensor& of) {
  const auto type = layout.dtype();
  const auto bytes = at::detail::computeStorageNbytes(layout.sizes(), layout.strides(),
                                                      type.itemsize(), layout.storage_offset());
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes,
                       c10::DataPtr(nullptr, what.release(), &delete_deferred, device),
                       /*allocator=*/nullptr, /*resizable=*/false);
  const auto backend = c10::computeDispatchKey(layout.scalar_type(), c10::kStrided, device);
  auto slice = parallel::tp_slice_handle(of);
  auto keys = c10::DispatchKeySet({util::kShardedDispatchKey, backend});
  if (slice) keys = keys.add(util::kTensorParallelDispatchKey);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), keys, type);
  impl->set_sizes_and_strides(layout.sizes(), layout.strides(), layout.storage_offset());
  at::Tensor deferred_tensor(std::move(impl));
  if (slice) parallel::register_tp_slice(deferred_tensor, std::move(slice));
  return deferred_tensor;
}

/// Replaces every storage-less argument by its value.
void replace_by_values(std::vector<c10::IValue>& arguments, size_t first) {
  util::for_each_tensor_in(arguments, first, [](at::Tensor& tensor) {
    if (deferred(tensor) == nullptr) return false;
    tensor = value_of(tensor);
    return true;
  });
}

/// When `op` on `arguments` casts a storage-less tensor to another floating dtype on its device
/// (autocast's _to_copy, of a parameter or of a view of one: linear casts weight.t()): the dtype.
std::optional<c10::ScalarType> floating_cast(const c10::OperatorHandle& op,
                                             const std::vector<c10::IValue>& arguments) {
  const auto& schema = op.schema();
  if (schema.operator_name().name != "aten::_to_copy" || arguments.empty() ||
      !arguments[0].isTensor() || deferred(arguments[0].toTensor()) == nullptr)
    return std::nullopt;
  auto argument = [&](const char* name) -> const c10::IValue* {
    const auto index = schema.argumentIndexWithName(name);
    return index && static_cast<size_t>(*index) < arguments.size() ? &arguments[*index] : nullptr;
  };
  const auto* dtype = argument("dtype");
  if (dtype == nullptr || dtype->isNone()) return std::nullopt;
  const auto target = dtype->toScalarType();
  if (!c10::isFloatingType(target) || target == arguments[0].toTensor().scalar_type())
    return std::nullopt;
  const auto* layout = argument("layout");
  if (layout != nullptr && !layout->isNone() && layout->toLayout() != c10::kStrided)
    return std::nullopt;
  const auto* format = argument("memory_format");
  if (format != nullptr && !format->isNone() &&
      format->toMemoryFormat() != c10::MemoryFormat::Preserve)
    return std::nullopt;
  // Device and pinning were checked by lazy_input: the cast stays on the tensor's device.
  return target;
}

/// True when `op` is a view whose result does not depend on its input's dtype (no dtype
/// argument: view(dtype) reinterprets bits), so viewing a cast is casting the view.
bool commutes_with_casts(const c10::OperatorHandle& op) {
  const auto& returned = op.schema().returns()[0].alias_info();
  if (returned == nullptr || returned->isWrite()) return false;
  for (const auto& argument : op.schema().arguments()) {
    if (argument.type()->kind() == c10::TypeKind::ScalarTypeType) return false;
    if (argument.type()->kind() == c10::TypeKind::OptionalType &&
        argument.type()->containedType(0)->kind() == c10::TypeKind::ScalarTypeType)
      return false;
  }
  return true;
}

/// An operator that aliases or casts a storage-less tensor, run when its value is needed.
class LazyResult final : public Deferred {
 public:
  LazyResult(c10::OperatorHandle op, std::vector<c10::IValue> arguments)
      : op_(std::move(op)), arguments_(std::move(arguments)) {}
  at::Tensor value() const override {
    // Values are real tensors: the operator runs below this key.
    c10::impl::ExcludeDispatchKeyGuard below(util::kShardedDispatchKey);
    if (const auto dtype = floating_cast(op_, arguments_)) {
      // Autocast's cast of a parameter (or a view of one) asks its source for the value in
      // that dtype: a unit gathered as bf16 shards, the same bits for half the bytes.
      return deferred(arguments_[0].toTensor())->value_as(*dtype);
    }
    auto stack = arguments_;
    replace_by_values(stack, 0);
    op_.callBoxed(&stack);
    return stack.front().toTensor();
  }
  at::Tensor value_as(c10::ScalarType dtype) const override {
    if (!commutes_with_casts(op_)) return value().to(dtype);
    c10::impl::ExcludeDispatchKeyGuard below(util::kShardedDispatchKey);
    auto stack = arguments_;
    util::for_each_tensor_in(stack, 0, [dtype](at::Tensor& tensor) {
      const Deferred* d = deferred(tensor);
      if (d == nullptr) return false;
      tensor = d->value_as(dtype);
      return true;
    });
    op_.callBoxed(&stack);
    return stack.front().toTensor();
  }

 private:
  c10::OperatorHandle op_;
  std::vector<c10::IValue> arguments_;
};

bool writes_argument(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

/// The index (among the arguments) of the storage-less tensor the operator's one result would
/// alias or be cast from, if the operator is a view of it or a same-device cast of it.
std::optional<size_t> lazy_input(const c10::OperatorHandle& op,
                                 const std::vector<c10::IValue>& arguments) {
  const auto& schema = op.schema();
  if (schema.returns().size() != 1 ||
      schema.returns()[0].type()->kind() != c10::TypeKind::TensorType)
    return std::nullopt;
  const auto* returned = schema.returns()[0].alias_info();
  const bool view = returned != nullptr && !returned->isWrite();
  const bool cast = schema.operator_name().name == "aten::_to_copy";
  if (!view && !cast) return std::nullopt;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto& argument = schema.arguments()[i];
    if (!arguments[i].isTensor() || deferred(arguments[i].toTensor()) == nullptr) continue;
    if (view && argument.alias_info() != nullptr && !argument.alias_info()->isWrite()) return i;
    if (cast && argument.name() == "self") {
      // Only a cast on the same device (autocast's): one to another device is run now.
      const auto device = schema.argumentIndexWithName("device");
      const auto pinned = schema.argumentIndexWithName("pin_memory");
      if (device && !arguments[*device].isNone() &&
          arguments[*device].toDevice() != arguments[i].toTensor().device())
        return std::nullopt;
      if (pinned && !arguments[*pinned].isNone() && arguments[*pinned].toBool())
        return std::nullopt;
      return i;
    }
  }
  return std::nullopt;
}

/// The lazy result of `op` on `arguments` (its input at `input`): shaped by running the
/// operator on a meta tensor of the input's layout.
at::Tensor lazy_result(const c10::OperatorHandle& op, std::vector<c10::IValue> arguments,
                       size_t input) {
  const at::Tensor source = arguments[input].toTensor();
  auto shaped = arguments;
  shaped[input] =
      at::empty_strided(source.sizes(), source.strides(), source.options().device(c10::kMeta));
  if (const auto device = op.schema().argumentIndexWithName("device")) {
    shaped[*device] = c10::IValue();
  }
  op.callBoxed(&shaped);
  const at::Tensor layout = shaped.front().toTensor();
  return make_deferred(std::make_unique<LazyResult>(op, std::move(arguments)), layout,
                       source.device(), source);
}

std::string operator_name(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

/// An operator that writes into a sharded parameter: the new value goes to its source.
void write_through(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack, size_t first,
                   size_t target) {
  const at::Tensor parameter = (*stack)[first + target].toTensor();
  ParameterSource* source = deferred(parameter)->source();
  TORCH_CHECK(source != nullptr, "accel: ", operator_name(op),
              " writes into a view of a sharded parameter (FULL_SHARD); write into the "
              "parameter itself, or change it before prepare()");
  if (op.schema().operator_name().name == "aten::copy_" && target == 0) {
    // copy_ needs no gather: the new value is given whole.
    const at::Tensor given = value_of((*stack)[first + 1].toTensor());
    source->assign(given.to(parameter.options()).expand(parameter.sizes()));
  } else {
    at::Tensor value = value_of(parameter).clone();
    (*stack)[first + target] = value;
    replace_by_values(*stack, first);
    op.callBoxed(stack);
    source->assign(value);
    // The operator returned its written argument: the parameter, not the copy.
    for (size_t i = stack->size() - op.schema().returns().size(); i < stack->size(); ++i) {
      if ((*stack)[i].isTensor() && (*stack)[i].toTensor().is_same(value)) (*stack)[i] = parameter;
    }
    return;
  }
  stack->resize(first);
  stack->push_back(parameter);
}

void sharded_fallback(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack) {
  c10::impl::ExcludeDispatchKeyGuard below(util::kShardedDispatchKey);
  const auto& schema = op.schema();
  const size_t count = schema.arguments().size();
  const size_t first = stack->size() - count;
  for (size_t i = 0; i < count; ++i) {
    if (!writes_argument(schema.arguments()[i])) continue;
    const c10::IValue& value = (*stack)[first + i];
    if (value.isTensor() && deferred(value.toTensor()) != nullptr) {
      write_through(op, stack, first, i);
      return;
    }
    bool into_sharded = false;
    std::vector<c10::IValue> argument{value};
    util::for_each_tensor_in(argument, 0, [&](at::Tensor& tensor) {
      into_sharded = into_sharded || deferred(tensor) != nullptr;
      return false;
    });
    TORCH_CHECK(!into_sharded, "accel: ", operator_name(op),
                " writes into a list holding sharded parameters (FULL_SHARD), which is not "
                "supported");
  }
  std::vector<c10::IValue> arguments(stack->begin() + static_cast<ptrdiff_t>(first), stack->end());
  if (const auto input = lazy_input(op, arguments)) {
    auto result = lazy_result(op, std::move(arguments), *input);
    stack->resize(first);
    stack->push_back(std::move(result));
    return;
  }
  replace_by_values(*stack, first);
  op.callBoxed(stack);
}

bool fallback_registration() {
  static const bool registered = [] {
    util::register_borrowed_key(util::kShardedDispatchKey, "FULL_SHARD's sharded parameters",
                                torch::CppFunction::makeFromBoxedFunction<&sharded_fallback>());
    return true;
  }();
  return registered;
}
// As offload.cpp's: registered at load, and again (once) by the entry point below.
const bool g_registration = fallback_registration();

}  // namespace

void shard_in_place(const at::Tensor& parameter, std::shared_ptr<ParameterSource> source,
                    c10::Device device) {
  fallback_registration();
  auto sharded = make_deferred(std::make_unique<ShardedParameter>(std::move(source)), parameter,
                               device, parameter);
  auto slice = parallel::tp_slice_handle(sharded);
  parameter.unsafeGetTensorImpl()->shallow_copy_from(sharded.getIntrusivePtr());
  if (slice) parallel::register_tp_slice(parameter, std::move(slice));
}

bool is_sharded(const at::Tensor& tensor) { return deferred(tensor) != nullptr; }

ParameterSource* source_of(const at::Tensor& tensor) {
  const Deferred* d = deferred(tensor);
  return d == nullptr ? nullptr : d->source();
}

at::Tensor gathered_value(const at::Tensor& tensor) {
  c10::impl::ExcludeDispatchKeyGuard below(util::kShardedDispatchKey);
  return value_of(tensor);
}

}  // namespace sharding
}  // namespace accel
