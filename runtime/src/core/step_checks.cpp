// The Accelerator's checks around a prepared optimizer's step (see step_checks.h).

#include "step_checks.h"

#include "distributed/collectives.h"
#include "distributed/distributed_state.h"
#include "util/collective_label.h"

#include <c10/util/Exception.h>
#include <torch/optim/optimizer.h>

#include <cstring>
#include <string>
#include <vector>

namespace accel {
namespace core {
namespace {

/// FNV-1a over a tensor's bytes, on the host: equal values, equal hash.
int64_t hash_of(const torch::Tensor& tensor) {
  const auto host = tensor.detach().to(torch::kCPU).contiguous();
  const auto* bytes = static_cast<const unsigned char*>(host.data_ptr());
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < host.nbytes(); ++i) {
    hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  int64_t out;
  std::memcpy(&out, &hash, sizeof out);
  return out;
}

}  // namespace

optim::StepChecks::Comparison parameter_comparison(
    std::shared_ptr<distributed::DistributedState> dist) {
  return [dist](const optim::StepChecks& checks, const torch::optim::Optimizer& optimizer) {
    util::CollectiveLabel collective_label("optimizer step check (ACCEL_DEBUG)");
    std::vector<torch::Tensor> params;
    for (const auto& group : optimizer.param_groups()) {
      for (const auto& p : group.params()) params.push_back(p);
    }
    auto low = torch::empty({static_cast<int64_t>(params.size())}, torch::kInt64);
    auto* hashes = low.data_ptr<int64_t>();
    for (size_t i = 0; i < params.size(); ++i) hashes[i] = hash_of(params[i]);
    auto high = low.clone();
    distributed::all_reduce(*dist->host_group(), low, Reduction::Min);
    distributed::all_reduce(*dist->host_group(), high, Reduction::Max);
    for (size_t i = 0; i < params.size(); ++i) {
      TORCH_CHECK(low[static_cast<int64_t>(i)].item<int64_t>() ==
                      high[static_cast<int64_t>(i)].item<int64_t>(),
                  "accel (ACCEL_DEBUG): after this optimizer step, ", checks.name_of(params[i], i),
                  " is not the same on every process: the processes are training different "
                  "models (a parameter no prepared model averages, or a step some processes "
                  "skipped)");
    }
  };
}

}  // namespace core
}  // namespace accel
