// Which Linears compute in FP8, and the routes that send them there (accel/fp8.h).
//
// LinearImpl::forward is not virtual, so a converted Linear cannot be another class. Its weight
// is recorded instead, and while an FP8 scope is open (mode_key.h) the operators a Linear's
// forward reaches (linear; addmm(bias, x, w.t()) for a 2-D input with a bias; matmul(x, w.t())
// otherwise) come to mode_key.cpp's kernels before autocast, with the weight or its t() (a
// view whose base is the weight), and the routes here send a converted weight's to fp8_linear.

#include <accel/fp8.h>

#include "fp8_linear.h"
#include "fp8_scope.h"
#include "mode_key.h"
#include "util/torch_compat.h"

#include <accel_common/name_table.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

namespace accel {
namespace precision {
namespace {

struct Fp8Layer {
  c10::weak_intrusive_ptr<c10::TensorImpl> weight{c10::intrusive_ptr<c10::TensorImpl>()};
  Fp8Recipe recipe = Fp8Recipe::Tensorwise;
  bool all_gather = false;  // tensorwise with Fp8Options.fsdp_float8_all_gather
  Fp8WeightGather gather;   // set once the weight is sharded
};

struct Fp8Layers {
  std::mutex mutex;
  std::unordered_map<const c10::TensorImpl*, Fp8Layer> by_weight;
};

Fp8Layers& layers() {
  // Never destroyed: a kernel may look a weight up during another library's teardown.
  static auto* registry = new Fp8Layers();
  return *registry;
}

/// The converted Linear whose weight `weight` is (called with the registry's mutex held).
Fp8Layer* layer_of(Fp8Layers& registry, const at::Tensor& weight) {
  if (!weight.defined()) return nullptr;
  const auto found = registry.by_weight.find(weight.unsafeGetTensorImpl());
  if (found == registry.by_weight.end()) return nullptr;
  if (found->second.weight.lock().get() != weight.unsafeGetTensorImpl()) {
    registry.by_weight.erase(found);  // a freed weight's address, reused
    return nullptr;
  }
  return &found->second;
}

/// The recipe of the converted Linear whose weight `weight` is.
std::optional<Fp8Recipe> recipe_of(const at::Tensor& weight) {
  auto& registry = layers();
  std::lock_guard<std::mutex> lock(registry.mutex);
  const Fp8Layer* layer = layer_of(registry, weight);
  if (layer == nullptr) return std::nullopt;
  return layer->recipe;
}

/// The converted weight `transposed` is the t() of, and its recipe.
std::optional<std::pair<at::Tensor, Fp8Recipe>> transposed_weight(const at::Tensor& transposed) {
  if (!transposed.defined() || transposed.dim() != 2 || !transposed.is_view()) {
    return std::nullopt;
  }
  const at::Tensor base(transposed._base());
  const auto recipe = recipe_of(base);
  if (!recipe || base.dim() != 2 || transposed.size(0) != base.size(1) ||
      transposed.size(1) != base.size(0) || transposed.stride(0) != base.stride(1) ||
      transposed.stride(1) != base.stride(0)) {
    return std::nullopt;
  }
  return std::make_pair(base, *recipe);
}

/// The input as the FP8 matmul takes it: in autocast's dtype where autocast is on (as torchao's
/// Float8Linear), as given otherwise.
at::Tensor compute_input(const at::Tensor& input) {
  const auto type = input.device().type();
  if (!input.is_floating_point() || !util::autocast_enabled(type)) return input;
  return input.to(util::autocast_dtype(type));
}

bool multiples_of_16(const torch::nn::LinearImpl& linear) {
  return linear.options.in_features() % 16 == 0 && linear.options.out_features() % 16 == 0;
}

std::string shape_of(const torch::nn::LinearImpl& linear) {
  std::ostringstream text;
  text << "in_features " << linear.options.in_features() << ", out_features "
       << linear.options.out_features();
  return text.str();
}

using NamedLinears = std::vector<std::pair<std::string, const torch::nn::LinearImpl*>>;

/// The Linears `options` names, each checked.
std::vector<std::string> named_choice(const NamedLinears& linears, const Fp8Options& options) {
  std::vector<std::string> chosen;
  for (const auto& wanted : options.modules()) {
    const auto found = std::find_if(linears.begin(), linears.end(),
                                    [&](const auto& linear) { return linear.first == wanted; });
    if (found == linears.end()) {
      std::ostringstream names;
      for (const auto& linear : linears) names << (names.tellp() > 0 ? ", " : "") << linear.first;
      TORCH_CHECK(false, "accel: Fp8Options.modules names '", wanted,
                  "', which is not a Linear of the model; its Linears: ",
                  linears.empty() ? std::string("none") : names.str());
    }
    TORCH_CHECK(multiples_of_16(*found->second), "accel: Fp8Options.modules names '", wanted, "' (",
                shape_of(*found->second),
                "): FP8 matmuls need both multiples of 16; leave it out of the modules");
    chosen.push_back(wanted);
  }
  return chosen;
}

/// The Linears the filter (or, unset, the default rule) selects.
std::vector<std::string> filtered_choice(const NamedLinears& linears, const Fp8Options& options) {
  std::vector<std::string> chosen;
  for (size_t i = 0; i < linears.size(); ++i) {
    const auto& [name, linear] = linears[i];
    if (options.module_filter()) {
      if (!options.module_filter()(name, *linear)) continue;
      TORCH_CHECK(multiples_of_16(*linear), "accel: Fp8Options.module_filter selects '", name,
                  "' (", shape_of(*linear),
                  "): FP8 matmuls need both multiples of 16; leave it out of the filter");
    } else if (i == 0 || i + 1 == linears.size() || !multiples_of_16(*linear)) {
      continue;  // the first and the last Linear stay, as those not multiples of 16
    }
    chosen.push_back(name);
  }
  return chosen;
}

}  // namespace

bool gathers_in_fp8(const at::Tensor& weight) {
  auto& registry = layers();
  std::lock_guard<std::mutex> lock(registry.mutex);
  const Fp8Layer* layer = layer_of(registry, weight);
  return layer != nullptr && layer->all_gather;
}

void set_fp8_weight_gather(const at::Tensor& weight, Fp8WeightGather gather) {
  auto& registry = layers();
  std::lock_guard<std::mutex> lock(registry.mutex);
  if (Fp8Layer* layer = layer_of(registry, weight)) layer->gather = std::move(gather);
}

Fp8Tensor fp8_weight(const at::Tensor& weight) {
  Fp8WeightGather gather;
  {
    auto& registry = layers();
    std::lock_guard<std::mutex> lock(registry.mutex);
    if (const Fp8Layer* layer = layer_of(registry, weight)) gather = layer->gather;
  }
  // The gather is collective: it runs without the registry's lock.
  if (gather) {
    if (auto gathered = gather()) return *std::move(gathered);
  }
  return quantize_fp8(weight, at::kFloat8_e4m3fn);
}

bool fp8_scope_open() { return mode_on(Mode::Fp8); }

void set_fp8_scope(bool open) { set_mode(Mode::Fp8, open); }

std::optional<at::Tensor> fp8_route_linear(const at::Tensor& input, const at::Tensor& weight,
                                           const std::optional<at::Tensor>& bias) {
  const auto recipe = recipe_of(weight);
  if (!recipe) return std::nullopt;
  return fp8_linear(compute_input(input), weight, bias, *recipe);
}

std::optional<at::Tensor> fp8_route_addmm(const at::Tensor& self, const at::Tensor& mat1,
                                          const at::Tensor& mat2, const c10::Scalar& beta,
                                          const c10::Scalar& alpha) {
  if (!beta.equal(1) || !alpha.equal(1) || self.dim() != 1) return std::nullopt;
  const auto weight = transposed_weight(mat2);
  if (!weight) return std::nullopt;
  return fp8_linear(compute_input(mat1), weight->first, self, weight->second);
}

std::optional<at::Tensor> fp8_route_matmul(const at::Tensor& self, const at::Tensor& other) {
  if (self.dim() < 1) return std::nullopt;
  const auto weight = transposed_weight(other);
  if (!weight) return std::nullopt;
  return fp8_linear(compute_input(self), weight->first, std::nullopt, weight->second);
}

}  // namespace precision

namespace {

constexpr std::array<std::pair<Fp8Recipe, const char*>, 2> kRecipes = {{
    {Fp8Recipe::Tensorwise, "tensorwise"},
    {Fp8Recipe::Rowwise, "rowwise"},
}};

}  // namespace

const char* to_string(Fp8Recipe recipe) { return name_in(kRecipes, recipe); }

std::optional<Fp8Recipe> parse_fp8_recipe(std::string_view name) {
  return value_in<Fp8Recipe>(kRecipes, name);
}

Fp8Options& Fp8Options::recipe(std::string_view name) {
  const auto parsed = parse_fp8_recipe(name);
  TORCH_CHECK(parsed.has_value(), "accel: Fp8Options.recipe '", name,
              "' is not an FP8 recipe; choices: tensorwise, rowwise");
  return recipe(*parsed);
}

std::vector<std::string> convert_to_fp8(torch::nn::Module& model, const Fp8Options& options) {
  const auto recipe = options.recipe();
  TORCH_CHECK(options.modules().empty() || !options.module_filter(),
              "accel: Fp8Options takes modules or module_filter, not both");
  precision::NamedLinears linears;
  for (const auto& item : model.named_modules()) {
    if (const auto* linear = dynamic_cast<const torch::nn::LinearImpl*>(item.value().get())) {
      linears.emplace_back(item.key(), linear);
    }
  }
  const auto chosen = options.modules().empty() ? precision::filtered_choice(linears, options)
                                                : precision::named_choice(linears, options);
  if (chosen.empty()) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      std::fprintf(stderr,
                   "accel: FP8 converts no Linear of this model: %s selects none of its %zu "
                   "Linears, so it trains in bf16\n",
                   options.module_filter() ? "Fp8Options.module_filter"
                                           : "the default filter (features multiples of 16, "
                                             "not the first or the last Linear)",
                   linears.size());
    });
    return chosen;
  }
  auto& registry = precision::layers();
  std::lock_guard<std::mutex> lock(registry.mutex);
  for (const auto& [name, linear] : linears) {
    if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) continue;
    const auto& weight = linear->weight;
    registry.by_weight[weight.unsafeGetTensorImpl()] = {
        c10::weak_intrusive_ptr<c10::TensorImpl>(weight.getIntrusivePtr()), recipe,
        recipe == precision::Fp8Recipe::Tensorwise && options.fsdp_float8_all_gather(), nullptr};
  }
  return chosen;
}

bool is_fp8_converted(const at::Tensor& weight) { return precision::recipe_of(weight).has_value(); }

}  // namespace accel
