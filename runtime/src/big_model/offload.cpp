#include "offload.h"

#include "util/boxed_arguments.h"
#include "util/dispatch_registration.h"

#include "util/torch_compat.h"

#include <accel/dispatch.h>
#include <accel/empty_weights.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <sys/mman.h>

#include <atomic>
#include <map>
#include <mutex>

namespace accel {
namespace big_model {
namespace {

thread_local FactoryRouter* t_router = nullptr;
constexpr int64_t kSmallFactoryElements = 4096;

struct Counters {
  std::atomic<int64_t> materialisations{0};
  std::atomic<int64_t> bytes_read{0};
  std::atomic<int64_t> live_bytes{0};
  std::atomic<int64_t> peak_live_bytes{0};
};
Counters& counters() {
  static Counters instance;
  return instance;
}

void delete_offloaded_weight(void* context) { delete static_cast<OffloadedWeight*>(context); }

const OffloadedWeight* offloaded_weight(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.key_set().has(util::kOffloadDispatchKey) ||
      !tensor.has_storage()) {
    return nullptr;
  }
  const auto& data = tensor.storage().data_ptr();
  if (data.get_deleter() != &delete_offloaded_weight) return nullptr;
  return static_cast<const OffloadedWeight*>(data.get_context());
}

/// Pages for weights read from disk. A block released by one operator is kept for the next read
/// of the same size (a model's layers repeat their shapes), so a forward pass faults in about
/// one layer's worth of pages instead of the whole model's. The pool holds at most twice as many
/// bytes as were ever alive at once (room for a layer's few distinct shapes); the rest is unmapped.
class ReadPages {
 public:
  static ReadPages& instance() {
    static ReadPages pages;
    return pages;
  }

  void* take(size_t bytes, const std::string& name) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = free_.find(bytes);
      if (found != free_.end()) {
        void* block = found->second;
        free_.erase(found);
        pooled_bytes_ -= bytes;
        return block;
      }
    }
    // MAP_POPULATE faults the block in one call rather than one trap per page.
    void* block = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    TORCH_CHECK(block != MAP_FAILED, "accel: no memory to read offloaded weight '", name, "' (",
                bytes, " bytes)");
    return block;
  }

  void give_back(void* block, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto limit = 2 * static_cast<size_t>(counters().peak_live_bytes.load());
      if (pooled_bytes_ + bytes <= limit) {
        free_.emplace(bytes, block);
        pooled_bytes_ += bytes;
        return;
      }
    }
    ::munmap(block, bytes);
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t pooled_bytes_ = 0;
};

/// A CPU tensor over pages of its own (see ReadPages), so that weights read for one operator do
/// not linger in the heap or in the resident set.
at::Tensor read_from_file(const OffloadedWeight& weight) {
  const int64_t numel = c10::multiply_integers(weight.sizes);
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(weight.stored_dtype));
  const auto options = at::TensorOptions().dtype(weight.stored_dtype);
  if (bytes == 0) return at::empty(weight.sizes, options);
  void* pages = ReadPages::instance().take(static_cast<size_t>(bytes), weight.name);
  auto& c = counters();
  const int64_t live = c.live_bytes.fetch_add(bytes) + bytes;
  int64_t peak = c.peak_live_bytes.load();
  while (live > peak && !c.peak_live_bytes.compare_exchange_weak(peak, live)) {
  }
  auto release = [bytes](void* p) {
    counters().live_bytes.fetch_sub(bytes);
    ReadPages::instance().give_back(p, static_cast<size_t>(bytes));
  };
  try {
    weight.file->read_at(pages, static_cast<uint64_t>(bytes), weight.offset, weight.name);
  } catch (...) {
    release(pages);
    throw;
  }
  c.bytes_read.fetch_add(bytes);
  return at::from_blob(pages, weight.sizes, release, options);
}

at::Tensor materialise(const OffloadedWeight& weight) {
  at::Tensor value = weight.file ? read_from_file(weight) : weight.held;
  if (value.scalar_type() != weight.dtype) value = value.to(weight.dtype);
  if (value.device() != weight.execution_device) value = value.to(weight.execution_device);
  counters().materialisations.fetch_add(1);
  return value;
}

/// Offloaded arguments are replaced by copies on the execution device, the other tensors are
/// moved there too (module inputs, activations), and the operator runs on them. The copies die
/// with the last result that refers to them.
void run_with_materialised_weights(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack) {
  std::optional<c10::Device> execution;
  util::for_each_tensor_argument(op, stack, [&](at::Tensor& tensor) {
    const OffloadedWeight* weight = offloaded_weight(tensor);
    if (weight == nullptr) return false;
    execution = weight->execution_device;
    tensor = materialise(*weight);
    return true;
  });
  if (execution && !execution->is_cpu()) {
    util::for_each_tensor_argument(op, stack, [&](at::Tensor& tensor) {
      if (!tensor.defined() || tensor.device() == *execution) return false;
      if (tensor.is_cpu() && tensor.dim() == 0) return false;  // scalars mix with any device
      tensor = tensor.to(*execution);
      return true;
    });
  }
  op.callBoxed(stack);
}

void offload_fallback(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack) {
  c10::impl::ExcludeDispatchKeyGuard no_reentry(util::kOffloadDispatchKey);
  if (t_router != nullptr) {
    t_router->route(op, stack);
  } else {
    run_with_materialised_weights(op, stack);
  }
}

bool fallback_registration() {
  static const bool registered = [] {
    util::register_borrowed_key(util::kOffloadDispatchKey, "offloaded weights",
                                torch::CppFunction::makeFromBoxedFunction<&offload_fallback>());
    return true;
  }();
  return registered;
}
// Registered when the library loads; fallback_registration() is also called by every entry
// point below, so a static link that drops this initialiser still registers it.
const bool g_registration = fallback_registration();

}  // namespace

void offload_in_place(const at::Tensor& tensor, OffloadedWeight weight) {
  fallback_registration();
  const auto type = c10::scalarTypeToTypeMeta(weight.dtype);
  const int64_t bytes =
      c10::multiply_integers(weight.sizes) * static_cast<int64_t>(type.itemsize());
  const auto sizes = weight.sizes;
  auto* context = new OffloadedWeight(std::move(weight));
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), bytes,
      c10::DataPtr(nullptr, context, &delete_offloaded_weight, c10::Device(c10::kMeta)),
      /*allocator=*/nullptr, /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet({util::kOffloadDispatchKey, c10::DispatchKey::Meta}),
      type);
  impl->set_sizes_contiguous(sizes);
  tensor.unsafeGetTensorImpl()->shallow_copy_from(impl);
}

void empty_in_place(const at::Tensor& tensor) {
  assign_in_place(tensor,
                  at::empty_strided(tensor.sizes(), tensor.strides(),
                                    at::TensorOptions().dtype(tensor.dtype()).device(c10::kMeta)));
}

void assign_in_place(const at::Tensor& tensor, const at::Tensor& value) {
  tensor.unsafeGetTensorImpl()->shallow_copy_from(value.getIntrusivePtr());
}

FactoryRouter::FactoryRouter(std::function<bool(int64_t)> to_meta, bool remember_results)
    : to_meta_(std::move(to_meta)),
      remember_results_(remember_results),
      previous_(t_router),
      route_factories_(util::kOffloadDispatchKey) {
  fallback_registration();
  t_router = this;
}

FactoryRouter::~FactoryRouter() { t_router = previous_; }

int64_t FactoryRouter::call_that_made(const at::Tensor& tensor) const {
  auto it = results_.find(tensor.unsafeGetTensorImpl());
  return it == results_.end() ? -1 : it->second.first;
}

void FactoryRouter::route(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack) {
  bool has_tensor_argument = false;
  util::for_each_tensor_argument(op, stack, [&](at::Tensor& tensor) {
    has_tensor_argument = has_tensor_argument || tensor.defined();
    return false;
  });
  if (has_tensor_argument) {
    op.callBoxed(stack);
    return;
  }
  const int64_t call = calls_++;
  const auto& schema = op.schema();
  const size_t count = schema.returns().size();
  std::optional<size_t> device_argument;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (schema.arguments()[i].name() == "device") device_argument = i;
  }
  bool to_meta = device_argument.has_value() && to_meta_(call);
  if (to_meta) {
    // The same call with device=meta: shapes and dtypes without storage, for this call alone
    // (a Meta key in the thread's dispatch set would also catch the calls the program makes
    // on real tensors while the constructor runs).
    const size_t first = stack->size() - schema.arguments().size();
    const std::vector<c10::IValue> arguments(stack->begin() + static_cast<ptrdiff_t>(first),
                                             stack->end());
    (*stack)[first + *device_argument] = c10::IValue(c10::Device(c10::kMeta));
    op.callBoxed(stack);
    bool small = true;
    for (size_t i = stack->size() - count; i < stack->size(); ++i) {
      if ((*stack)[i].isTensor() && (*stack)[i].toTensor().numel() > kSmallFactoryElements)
        small = false;
    }
    if (small) {
      stack->resize(stack->size() - count);
      stack->insert(stack->end(), arguments.begin(), arguments.end());
      op.callBoxed(stack);
      to_meta = false;
    }
  } else {
    op.callBoxed(stack);
  }
  if (!remember_results_) return;
  for (size_t i = stack->size() - count; i < stack->size(); ++i) {
    if ((*stack)[i].isTensor()) {
      // A weak reference: it keeps the address from being reused without raising the use count,
      // which LibTorch's factory wrappers check before reusing the tensor as a variable.
      const at::Tensor& result = (*stack)[i].toTensor();
      results_.emplace(
          result.unsafeGetTensorImpl(),
          std::make_pair(call, c10::weak_intrusive_ptr<c10::TensorImpl>(result.getIntrusivePtr())));
    }
  }
}

}  // namespace big_model

OffloadStatistics offload_statistics() {
  auto& c = big_model::counters();
  OffloadStatistics s;
  s.materialisations = c.materialisations.load();
  s.bytes_read = c.bytes_read.load();
  s.live_bytes = c.live_bytes.load();
  s.peak_live_bytes = c.peak_live_bytes.load();
  return s;
}

void reset_offload_statistics() {
  auto& c = big_model::counters();
  c.materialisations = 0;
  c.bytes_read = 0;
  c.peak_live_bytes = c.live_bytes.load();
}

bool is_offloaded(const torch::Tensor& tensor) {
  return big_model::offloaded_weight(tensor) != nullptr;
}

bool is_empty_weight(const torch::Tensor& tensor) { return tensor.defined() && tensor.is_meta(); }

}  // namespace accel
