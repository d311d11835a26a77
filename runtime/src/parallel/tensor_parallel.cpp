// A tensor-parallel plan applied in place: see tensor_parallel.h.

#include "tensor_parallel.h"

#include "distributed/collectives.h"
#include "tp_collectives.h"
#include "tp_kernels.h"
#include "util/torch_compat.h"

#include <accel_common/name_table.h>

#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

namespace accel {
namespace parallel {
namespace {

struct Registered {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  std::shared_ptr<const TpSlice> slice;
};

std::mutex registry_mutex;
// By storage and offset: a planned parameter's views that start where it does (its t(), a
// detach()) find it; parameters bound into one flat buffer (ZeRO-1 and -2) start apart.
using StorageAt = std::pair<const c10::StorageImpl*, int64_t>;
std::map<StorageAt, Registered>& registry() {
  static auto* map = new std::map<StorageAt, Registered>();
  return *map;
}
StorageAt place_of(const at::Tensor& tensor) {
  return {tensor.storage().unsafeGetStorageImpl(), tensor.storage_offset()};
}

std::vector<std::string> components(const std::string& name) {
  std::vector<std::string> parts;
  std::stringstream text(name);
  for (std::string part; std::getline(text, part, '.');) parts.push_back(part);
  return parts;
}

bool matches(const std::string& pattern, const std::string& name) {
  const auto want = components(pattern), have = components(name);
  if (want.size() != have.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != "*" && want[i] != have[i]) return false;
  }
  return true;
}

std::string style_names() {
  return "colwise, rowwise, colwise_rep (colwise_gather_output), rowwise_rep "
         "(rowwise_split_input), embedding_rowwise, sequence_parallel, replicate";
}

/// One planned module and how its parameters split.
struct PlannedModule {
  std::string name;
  TpStyle style;
  torch::nn::Module* module;
  std::vector<std::pair<std::string, int64_t>> splits;  // parameter name, dim (-1: whole)
  /// Parameters used on a shard of the sequence by every process: their gradients are summed
  /// over the group (sequence_parallel modules, and rowwise biases in such a plan).
  std::vector<std::string> summed;
};

void check_divides(int64_t size, int64_t tp, const std::string& what, const PlannedModule& m) {
  TORCH_CHECK(size % tp == 0, "accel: the tensor-parallel plan splits '", m.name, "' ",
              to_string(m.style), " over tp_size ", tp, ", which does not divide its ", what, " (",
              size, ")");
}

/// The parameters `m` splits, checked against its type and sizes.
void plan_splits(PlannedModule& m, int64_t tp) {
  if (m.style == TpStyle::sequence_parallel) {
    // LayerNorm and Dropout run on the shard as they are; an Embedding's lookups are split.
    const bool embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(m.module) != nullptr;
    TORCH_CHECK(embedding || dynamic_cast<torch::nn::LayerNormImpl*>(m.module) != nullptr ||
                    dynamic_cast<torch::nn::DropoutImpl*>(m.module) != nullptr,
                "accel: the tensor-parallel plan splits '", m.name,
                "' sequence_parallel, which needs a torch::nn::LayerNorm, Dropout or Embedding; "
                "it is a ",
                m.module->name());
    if (embedding) {
      // Looked up whole, then split: backward gathers the lookups' gradient whole first, so the
      // table's gradient is whole on every process already.
      m.splits = {{"weight", -1}};
      return;
    }
    for (const auto& p : m.module->named_parameters(/*recurse=*/false)) m.summed.push_back(p.key());
    return;
  }
  const bool linear_style = m.style != TpStyle::embedding_rowwise && m.style != TpStyle::replicate;
  if (linear_style) {
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.module);
    TORCH_CHECK(linear != nullptr, "accel: the tensor-parallel plan splits '", m.name, "' ",
                to_string(m.style), ", which needs a torch::nn::Linear; it is a ",
                m.module->name());
    // A bias is split with the output features only where the output stays split (colwise);
    // elsewhere it is added whole after the collective, as DTensor's styles do.
    if (m.style == TpStyle::colwise) {
      check_divides(linear->options.out_features(), tp, "out_features", m);
      m.splits = {{"weight", 0}, {"bias", 0}};
    } else if (m.style == TpStyle::colwise_gather_output) {
      check_divides(linear->options.out_features(), tp, "out_features", m);
      m.splits = {{"weight", 0}};
    } else {
      check_divides(linear->options.in_features(), tp, "in_features", m);
      m.splits = {{"weight", 1}};
      m.summed = {"bias"};  // summed only in a sequence-parallel plan (see apply)
    }
  } else if (m.style == TpStyle::embedding_rowwise) {
    auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(m.module);
    TORCH_CHECK(embedding != nullptr, "accel: the tensor-parallel plan splits '", m.name,
                "' embedding_rowwise, which needs a torch::nn::Embedding; it is a ",
                m.module->name());
    TORCH_CHECK(!embedding->options.max_norm().has_value(), "accel: '", m.name,
                "' has max_norm, which renormalises rows in place; embedding_rowwise cannot "
                "split it");
    TORCH_CHECK(!embedding->options.scale_grad_by_freq() && !embedding->options.sparse(),
                "accel: '", m.name,
                "' has scale_grad_by_freq or sparse, which embedding_rowwise does not split");
    check_divides(embedding->options.num_embeddings(), tp, "num_embeddings", m);
    m.splits = {{"weight", 0}};
  }
}

/// Makes `value` the value of `parameter` in place (its registered entry and member alike),
/// with the key: a tensor sharing `value`'s storage.
void hold_in_place(const at::Tensor& parameter, const at::Tensor& value) {
  const auto backend = c10::computeDispatchKey(value.scalar_type(), c10::kStrided, value.device());
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(value.storage()),
      c10::DispatchKeySet({util::kTensorParallelDispatchKey, backend}), value.dtype());
  impl->set_sizes_and_strides(value.sizes(), value.strides(), value.storage_offset());
  parameter.unsafeGetTensorImpl()->shallow_copy_from(impl);
}

void register_in(const at::Tensor& parameter, std::shared_ptr<const TpSlice> slice) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto* storage = parameter.storage().unsafeGetStorageImpl();
  // Lazy views of sharded slices are registered as they are made: forget the gone ones now and
  // then, so the registry holds about what is alive.
  static size_t inserts = 0;
  if (++inserts % 1024 == 0) {
    for (auto it = registry().begin(); it != registry().end();) {
      it = it->second.storage.expired() ? registry().erase(it) : std::next(it);
    }
  }
  registry().insert_or_assign(
      place_of(parameter),
      Registered{c10::weak_intrusive_ptr<c10::StorageImpl>(
                     c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage)),
                 std::move(slice)});
}

std::shared_ptr<const TpSlice> registered_slice(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.key_set().has(util::kTensorParallelDispatchKey) ||
      !tensor.has_storage())
    return nullptr;
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().find(place_of(tensor));
  if (it == registry().end() || it->second.storage.expired()) return nullptr;
  return it->second.slice;
}

/// Makes backward sum the gradients of `names` among `parameters` over `group`: each process
/// used them on its shard of the sequence.
void sum_gradients_over(const torch::OrderedDict<std::string, torch::Tensor>& parameters,
                        const std::vector<std::string>& names,
                        const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  for (const auto& name : names) {
    const auto* parameter = parameters.find(name);
    if (parameter == nullptr || !parameter->defined() || !parameter->requires_grad()) continue;
    const_cast<at::Tensor&>(*parameter).register_hook([group](const torch::Tensor& grad) {
      auto sum = grad.contiguous().clone();
      distributed::all_reduce(*group, sum, Reduction::Sum);
      return sum;
    });
  }
}

}  // namespace

TensorParallelPlan plan_for_part(const torch::nn::Module& part, const TensorParallelPlan& plan) {
  const auto modules = part.named_modules();
  TensorParallelPlan kept;
  for (const auto& entry : plan.entries()) {
    const bool found = std::any_of(modules.begin(), modules.end(), [&](const auto& item) {
      return matches(entry.first, item.key());
    });
    if (found) kept.add(entry.first, entry.second);
  }
  return kept;
}

namespace {

std::vector<PlannedModule> planned_modules(const torch::nn::Module& model,
                                           const TensorParallelPlan& plan, int64_t tp) {
  const auto modules = model.named_modules();
  std::vector<PlannedModule> planned;
  for (const auto& [pattern, style_name] : plan.entries()) {
    const auto style = parse_tp_style(style_name);
    TORCH_CHECK(style.has_value(), "accel: the tensor-parallel plan gives '", pattern,
                "' the style '", style_name, "', which does not exist (styles: ", style_names(),
                ")");
    bool found = false;
    for (const auto& item : modules) {
      if (!matches(pattern, item.key())) continue;
      found = true;
      for (const auto& earlier : planned) {
        TORCH_CHECK(earlier.name != item.key(), "accel: the tensor-parallel plan names '",
                    item.key(), "' twice (", to_string(earlier.style), " and ", style_name, ")");
      }
      PlannedModule m{item.key(), *style, item.value().get(), {}, {}};
      plan_splits(m, tp);
      planned.push_back(std::move(m));
    }
    TORCH_CHECK(found, "accel: the tensor-parallel plan's pattern '", pattern,
                "' matches no module of the model (a '*' stands for one name component; the "
                "model's modules are named as named_modules() names them, e.g. '",
                modules.size() > 1 ? modules[1].key() : std::string("fc1"), "')");
  }
  return planned;
}

}  // namespace

namespace {

// Each style's own name first (to_string's), then the names torch's plans also use.
constexpr std::pair<TpStyle, const char*> kTpStyles[] = {
    {TpStyle::colwise, "colwise"},
    {TpStyle::colwise_gather_output, "colwise_gather_output"},
    {TpStyle::rowwise, "rowwise"},
    {TpStyle::rowwise_split_input, "rowwise_split_input"},
    {TpStyle::embedding_rowwise, "embedding_rowwise"},
    {TpStyle::replicate, "replicate"},
    {TpStyle::sequence_parallel, "sequence_parallel"},
    {TpStyle::colwise_gather_output, "colwise_rep"},
    {TpStyle::rowwise_split_input, "rowwise_rep"},
};

}  // namespace

std::optional<TpStyle> parse_tp_style(const std::string& name) {
  return value_in<TpStyle>(kTpStyles, name);
}

const char* to_string(TpStyle style) { return name_in(kTpStyles, style); }

void check_tensor_parallel_plan(const torch::nn::Module& model, const TensorParallelPlan& plan,
                                int64_t tp) {
  planned_modules(model, plan, tp);
}

void apply_tensor_parallel_plan(torch::nn::Module& model, const TensorParallelPlan& plan,
                                const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  const auto planned = planned_modules(model, plan, group->getSize());
  const bool sequence_parallel =
      std::any_of(planned.begin(), planned.end(),
                  [](const PlannedModule& m) { return m.style == TpStyle::sequence_parallel; });
  if (sequence_parallel) {
    for (const auto& m : planned) {
      TORCH_CHECK(m.style != TpStyle::rowwise_split_input,
                  "accel: the tensor-parallel plan has sequence_parallel regions and splits '",
                  m.name,
                  "' rowwise_split_input, whose whole input a sequence-parallel region does not "
                  "give; plan it rowwise after a colwise layer");
    }
  }
  register_tp_kernels();
  for (const auto& m : planned) {
    const auto parameters = m.module->named_parameters(/*recurse=*/false);
    if (sequence_parallel) sum_gradients_over(parameters, m.summed, group);
    for (const auto& [parameter_name, dim] : m.splits) {
      const auto* parameter = parameters.find(parameter_name);
      if (parameter == nullptr || !parameter->defined()) continue;  // a Linear without bias
      TpSlice slice;
      slice.style = m.style;
      slice.dim = dim;
      slice.whole_size = dim >= 0 ? parameter->size(dim) : 0;
      slice.name = m.name.empty() ? parameter_name : m.name + "." + parameter_name;
      slice.group = group;
      slice.sequence_parallel = sequence_parallel;
      torch::NoGradGuard no_grad;
      if (dim >= 0) {
        hold_in_place(
            *parameter,
            group_part(parameter->detach(), *group, dim).clone(at::MemoryFormat::Contiguous));
      } else {
        hold_in_place(*parameter, parameter->detach());
      }
      if (parameter->grad().defined())
        const_cast<at::Tensor&>(*parameter).mutable_grad() = at::Tensor();
      register_in(*parameter, std::make_shared<const TpSlice>(std::move(slice)));
    }
  }
}

std::shared_ptr<const TpSlice> tp_slice_handle(const at::Tensor& tensor) {
  return registered_slice(tensor);
}

void register_tp_slice(const at::Tensor& tensor, std::shared_ptr<const TpSlice> slice) {
  register_in(tensor, std::move(slice));
}

const TpSlice* tp_slice_of(const at::Tensor& tensor) {
  // Slices are never dropped from the registry (a rebound one is kept under its new place as
  // well as its old): the pointer outlives the lookup.
  return registered_slice(tensor).get();
}

void set_data_keeping_slice(const at::Tensor& parameter, const at::Tensor& value) {
  auto slice = registered_slice(parameter);
  const_cast<at::Tensor&>(parameter).set_data(value);
  if (slice == nullptr) return;
  hold_in_place(parameter, value);
  register_in(parameter, std::move(slice));
}

at::Tensor whole_tensor(const at::Tensor& tensor) {
  const TpSlice* slice = tp_slice_of(tensor);
  return slice == nullptr ? tensor : whole_tensor(tensor, *slice);
}

at::Tensor whole_tensor(const at::Tensor& value, const TpSlice& slice) {
  if (slice.dim < 0) return value;
  c10::impl::ExcludeDispatchKeyGuard plain(util::kTensorParallelDispatchKey);
  auto parts = distributed::all_gather(*slice.group, value.detach().contiguous());
  return at::cat(parts, slice.dim);
}

std::vector<int64_t> whole_sizes(const at::Tensor& tensor) {
  auto sizes = tensor.sizes().vec();
  const TpSlice* slice = tp_slice_of(tensor);
  if (slice != nullptr && slice->dim >= 0)
    sizes[static_cast<size_t>(slice->dim)] = slice->whole_size;
  return sizes;
}

at::Tensor this_part_of(const at::Tensor& whole, const at::Tensor& tensor) {
  const TpSlice* slice = tp_slice_of(tensor);
  if (slice == nullptr || slice->dim < 0) return whole;
  return group_part(whole, *slice->group, slice->dim);
}

}  // namespace parallel
}  // namespace accel
