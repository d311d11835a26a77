#include <accel/grad_scaler.h>

#include "util/torch_compat.h"

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace accel {
namespace {

/// Adds 1 to `found_inf` if any element of `grads` is inf or nan, and multiplies every gradient by
/// `inv_scale`.
void check_and_unscale(std::vector<torch::Tensor>& grads, torch::Tensor& found_inf,
                       double inv_scale) {
  const auto device = grads.front().device();
  if (util::fused_unscale_available(device.type())) {
    auto inv = torch::full({1}, inv_scale, torch::dtype(torch::kFloat32).device(device));
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv);
    return;
  }
  // The inf-norm (max |g|) of a tensor is inf or nan exactly when one of its elements is, and it
  // cannot overflow as a sum of squares can; it reads the gradients and writes nothing.
  auto norms = torch::_foreach_norm(grads, std::numeric_limits<double>::infinity());
  found_inf.add_(torch::stack(norms).isfinite().logical_not().any().to(found_inf.dtype()));
  torch::_foreach_mul_(grads, inv_scale);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(std::move(options)), scale_(options_.init_scale()) {
  TORCH_CHECK(options_.init_scale() > 0, "accel: GradScaler init_scale must be > 0, got ",
              options_.init_scale());
  TORCH_CHECK(options_.growth_factor() > 1, "accel: GradScaler growth_factor must be > 1, got ",
              options_.growth_factor());
  TORCH_CHECK(options_.backoff_factor() > 0 && options_.backoff_factor() < 1,
              "accel: GradScaler backoff_factor must be in (0, 1), got ",
              options_.backoff_factor());
  TORCH_CHECK(options_.growth_interval() > 0, "accel: GradScaler growth_interval must be > 0, got ",
              options_.growth_interval());
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  return options_.enabled() ? loss * scale_ : loss;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) return;
  auto& record = this_step_[&optimizer];
  TORCH_CHECK(!record.unscaled,
              "accel: unscale_() was already called on this optimizer since the last update()");
  record.unscaled = true;
  record.found_inf = check_gradients(optimizer, 1.0 / scale_);
}

bool GradScaler::unscaled(const torch::optim::Optimizer& optimizer) const {
  auto record = this_step_.find(&optimizer);
  return record != this_step_.end() && record->second.unscaled;
}

bool GradScaler::check_gradients(torch::optim::Optimizer& optimizer, double unscale_by) {
  // One pass per device over all of its gradients, as GradScaler does.
  std::vector<std::pair<c10::Device, std::vector<torch::Tensor>>> by_device;
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      auto grad = param.grad();
      if (!grad.defined()) continue;
      TORCH_CHECK(!grad.is_sparse(), "accel: GradScaler does not unscale sparse gradients");
      auto it = std::find_if(by_device.begin(), by_device.end(),
                             [&](const auto& entry) { return entry.first == grad.device(); });
      if (it == by_device.end()) it = by_device.insert(by_device.end(), {grad.device(), {}});
      it->second.push_back(grad);
    }
  }
  double found = 0;
  for (auto& entry : by_device) {
    auto found_inf = torch::zeros({1}, torch::dtype(torch::kFloat32).device(entry.first));
    check_and_unscale(entry.second, found_inf, unscale_by);
    found += found_inf.item<double>();
  }
  return any_process_ ? any_process_(found > 0) : found > 0;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer, const std::function<void()>& step) {
  if (!options_.enabled()) {
    step();
    return true;
  }
  auto& record = this_step_[&optimizer];
  if (!record.unscaled) unscale_(optimizer);
  if (this_step_[&optimizer].found_inf) return false;
  step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled() || this_step_.empty()) return;
  bool found_inf = false;
  for (const auto& entry : this_step_) found_inf = found_inf || entry.second.found_inf;
  this_step_.clear();
  if (found_inf) {
    scale_ *= options_.backoff_factor();
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval()) {
    const double grown = scale_ * options_.growth_factor();
    // As PyTorch: the scale never grows into inf.
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", torch::tensor(scale_, torch::kFloat64));
  archive.write("growth_tracker", torch::tensor(growth_tracker_, torch::kInt64));
  archive.write("growth_factor", torch::tensor(options_.growth_factor(), torch::kFloat64));
  archive.write("backoff_factor", torch::tensor(options_.backoff_factor(), torch::kFloat64));
  archive.write("growth_interval", torch::tensor(options_.growth_interval(), torch::kInt64));
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  auto read = [&](const char* key) {
    torch::Tensor value;  // a fresh tensor: reading into a defined one would keep its dtype
    archive.read(key, value);
    return value;
  };
  scale_ = read("scale").item<double>();
  growth_tracker_ = read("growth_tracker").item<int64_t>();
  options_.growth_factor(read("growth_factor").item<double>());
  options_.backoff_factor(read("backoff_factor").item<double>());
  options_.growth_interval(read("growth_interval").item<int64_t>());
  this_step_.clear();
}

}  // namespace accel
