// Optimizer step time: a prepared optimizer (accel's exact kernels on the CPU, ATen's fused ones
// on CUDA), ATen's fused kernels on the CPU (the prepared step before the exact kernels) and the
// foreach path against LibTorch's own step on the same parameters, for AdamW, Adam and SGD with
// momentum, on the parameters of a compute-bound MLP (4 layers of 2048, 16.8M parameters) and an
// overhead-bound one (3 layers of 256). Then the whole training step with AdamW (batch 64): accel's
// prepared model and optimizer against the plain LibTorch loop, in fp32 and (on a GPU) under bf16
// autocast, with each of accel's step paths. Steps alternate between the contenders in rounds;
// figures are ratios of medians. Beside each step time, the ATen ops one step dispatches, and on a
// GPU the kernels it launches (the Kineto profiler's count).
//   accel_bench_optimizer_step [ROUNDS] [--device cuda]
// On a GPU its twin for PyTorch and Accelerate is vs_accelerate/gpu_step.py (scripts/gpu-check.sh
// runs both on the same card).

#include <ATen/autocast_mode.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#include <ATen/record_function.h>
#include <accel/accel.h>
#include <accel/detail/multi_tensor_step.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include "bench_util.h"
#include "vs_accelerate/job.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <type_traits>

namespace {

torch::Device device = torch::kCPU;  // --device

/// Wall time of `fn` on an idle GPU, waiting for its queue to drain at the end.
template <typename Fn>
double timed(Fn&& fn) {
  if (device.is_cuda()) torch::cuda::synchronize();
  return accel_bench::seconds([&] {
    fn();
    if (device.is_cuda()) torch::cuda::synchronize();
  });
}

std::vector<torch::Tensor> mlp_parameters(int64_t width, int64_t depth) {
  std::vector<torch::Tensor> params;
  for (int64_t i = 0; i < depth; ++i) {
    params.push_back(torch::randn({width, width}) * 0.02);
    params.push_back(torch::zeros({width}));
  }
  params.push_back(torch::randn({1, width}) * 0.02);
  params.push_back(torch::zeros({1}));
  for (auto& p : params) {
    p = p.to(device);
    p.requires_grad_(true);
    p.mutable_grad() = torch::randn_like(p) * 1e-3;
  }
  return params;
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) {
    auto copy = p.detach().clone().requires_grad_(true);
    copy.mutable_grad() = p.grad().clone();
    out.push_back(copy);
  }
  return out;
}

/// ATen ops a call dispatches at the top level (ops called from inside other ops are not counted):
/// on a GPU each is at least one kernel launch, so this is the launch count's lower bound and the
/// CPU's dispatch count.
int64_t top_level_ops(const std::function<void()>& call) {
  static thread_local int64_t depth = 0, count = 0;
  depth = count = 0;
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
            if (depth++ == 0) ++count;
            return nullptr;
          },
          [](const at::RecordFunction&, at::ObserverContext*) { --depth; })
          .scopes({at::RecordScope::FUNCTION}));
  call();
  at::removeCallback(handle);
  return count;
}

/// GPU kernels a call launches, as the Kineto profiler records them (copies and fills left out);
/// -1 on the CPU.
int64_t kernel_launches(const std::function<void()>& call) {
  if (!device.is_cuda()) return -1;
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  call();
  torch::cuda::synchronize();
  const auto result = profiler::disableProfiler();
  int64_t kernels = 0;
  for (const auto& event : result->events()) {
    const auto name = event.name();
    if (event.deviceType() == c10::DeviceType::CUDA && name.rfind("Memcpy", 0) != 0 &&
        name.rfind("Memset", 0) != 0) {
      ++kernels;
    }
  }
  return kernels;
}

/// "N ops" on the CPU, "N ops, K kernels" on a GPU.
std::string dispatched(const std::function<void()>& call) {
  std::string text = std::to_string(top_level_ops(call)) + " ops";
  const int64_t kernels = kernel_launches(call);
  if (kernels >= 0) text += ", " + std::to_string(kernels) + " kernels";
  return text;
}

std::vector<double> handover_share;  // per comparison: step-count handover / fused step

/// The step accel took on the CPU before its exact kernels: ATen's fused kernels (PyTorch's
/// `fused=True`), one pass each like accel's, but rounding as PyTorch's fused step does, not as
/// LibTorch's step. On state of its own; for timing only.
template <typename Options>
class AtenFusedStep {
 public:
  AtenFusedStep(const std::vector<torch::Tensor>& params, const Options& options)
      : params_(params), options_(options) {
    for (const auto& p : params_) {
      grads_.push_back(p.grad());
      first_.push_back(torch::zeros_like(p));
      second_.push_back(torch::zeros_like(p));
    }
  }
  void step() {
    torch::NoGradGuard no_grad;
    ++count_;
    if constexpr (std::is_same_v<Options, torch::optim::SGDOptions>) {
      at::_fused_sgd_(params_, grads_, first_, options_.weight_decay(), options_.momentum(),
                      options_.lr(), options_.dampening(), options_.nesterov(),
                      /*maximize=*/false, /*is_first_step=*/count_ == 1, std::nullopt,
                      std::nullopt);
    } else {
      const auto [beta1, beta2] = options_.betas();
      const auto steps =
          accel::detail::step_tensors(std::vector<int64_t>(params_.size(), count_), device);
      auto kernel = [](auto&&... args) {
        if constexpr (std::is_same_v<Options, torch::optim::AdamWOptions>) {
          at::_fused_adamw_(args...);
        } else {
          at::_fused_adam_(args...);
        }
      };
      kernel(params_, grads_, first_, second_, std::vector<torch::Tensor>{}, steps, options_.lr(),
             beta1, beta2, options_.weight_decay(), options_.eps(), /*amsgrad=*/false,
             /*maximize=*/false, std::nullopt, std::nullopt);
    }
  }

 private:
  std::vector<torch::Tensor> params_, grads_, first_, second_;
  Options options_;
  int64_t count_ = 0;
};

template <typename O, typename Options>
void compare(accel::Accelerator& accelerator, const std::string& model, int64_t width,
             int64_t depth, const std::string& name, const Options& options, int rounds) {
  auto params = mlp_parameters(width, depth);
  auto fused_params = copies(params);
  auto foreach_params = copies(params);
  O plain(params, options);
  auto prepared = accelerator.prepare(O(fused_params, options));
  O listed(foreach_params, options);
  AtenFusedStep<Options> aten_fused(copies(params), options);
  // Per round, so a round takes milliseconds or more.
  const int steps = width >= 1024 && device.is_cpu() ? 3 : 50;
  std::vector<double> own, fused, foreach_times, aten_times;
  for (int round = 0; round < rounds + 2; ++round) {  // the first two rounds warm up
    const double a = timed([&] {
      for (int i = 0; i < steps; ++i) plain.step();
    });
    const double b = timed([&] {
      for (int i = 0; i < steps; ++i) prepared.step();
    });
    const double c = timed([&] {
      for (int i = 0; i < steps; ++i) {
        accel::detail::multi_tensor_step(listed, accel::detail::StepKernel::foreach);
      }
    });
    // On a GPU the prepared step is ATen's fused kernel already.
    const double d = device.is_cpu() ? timed([&] {
      for (int i = 0; i < steps; ++i) aten_fused.step();
    })
                                     : b;
    if (round < 2) continue;
    own.push_back(a / steps);
    fused.push_back(b / steps);
    foreach_times.push_back(c / steps);
    aten_times.push_back(d / steps);
  }
  const double own_ms = accel_bench::median(own) * 1e3, fused_ms = accel_bench::median(fused) * 1e3;
  const double foreach_ms = accel_bench::median(foreach_times) * 1e3;
  const double aten_ms = accel_bench::median(aten_times) * 1e3;
  // Adam's CUDA kernels read the step count from a float tensor per parameter, LibTorch keeps an
  // integer: what handing it over costs each step, against the whole fused step.
  if constexpr (!std::is_same_v<O, torch::optim::SGD>) {
    if (device.is_cuda()) {
      std::vector<double> handover;
      for (int round = 0; round < rounds; ++round) {
        const std::vector<int64_t> counts(fused_params.size(), 100 + round);
        handover.push_back(timed([&] {
                             for (int i = 0; i < steps; ++i) {
                               accel::detail::step_tensors(counts, device);
                             }
                           }) /
                           steps);
      }
      handover_share.push_back(accel_bench::median(handover) * 1e3 / fused_ms);
    }
  }
  const auto own_ops = dispatched([&] { plain.step(); });
  const auto fused_ops = dispatched([&] { prepared.step(); });
  const auto foreach_ops = dispatched(
      [&] { accel::detail::multi_tensor_step(listed, accel::detail::StepKernel::foreach); });
  std::printf(
      "| %s | %s | %.3f ms, %s | %.3f ms, %s | %.2f | %.3f ms | %.2f | %.3f ms, %s | %.2f |\n",
      model.c_str(), name.c_str(), own_ms, own_ops.c_str(), fused_ms, fused_ops.c_str(),
      fused_ms / own_ms, aten_ms, aten_ms / own_ms, foreach_ms, foreach_ops.c_str(),
      foreach_ms / own_ms);
}

/// Plain LibTorch's autocast for a scope: what a hand-written bf16 loop sets around its forward.
class PlainAutocast {
 public:
  explicit PlainAutocast(bool on) : on_(on) {
    if (!on_) return;
    at::autocast::set_autocast_dtype(device.type(), at::kBFloat16);
    at::autocast::set_autocast_enabled(device.type(), true);
  }
  ~PlainAutocast() {
    if (!on_) return;
    at::autocast::set_autocast_enabled(device.type(), false);
    at::autocast::clear_cache();
  }
  PlainAutocast(const PlainAutocast&) = delete;
  PlainAutocast& operator=(const PlainAutocast&) = delete;

 private:
  bool on_;
};

/// One row: accel's prepared model and optimizer, stepping by `path` ("fused", "foreach" or
/// "LibTorch's"), against the plain LibTorch loop with LibTorch's AdamW, both in `precision`
/// ("no" or "bf16").
void whole_step(const std::string& model_name, int64_t width, int64_t depth,
                const std::string& precision, const std::string& path, int rounds) {
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(device.is_cpu())
                                     .mixed_precision(precision)
                                     .fused_optimizer(path != "LibTorch's"));
  const auto x = torch::randn({64, width}).to(device);
  const auto y = torch::randn({64, 1}).to(device);
  torch::manual_seed(0);
  auto plain_model = accel_vs::build_mlp(width, depth);
  plain_model->to(device);
  torch::optim::AdamW plain_optimizer(plain_model->parameters(), torch::optim::AdamWOptions(1e-3));
  torch::manual_seed(0);
  auto model = accel_vs::build_mlp(width, depth);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(
      torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-3)));
  const int steps = width >= 1024 && device.is_cpu() ? 3 : 50;
  std::vector<double> plain, accelerated;
  for (int round = 0; round < rounds + 2; ++round) {
    const double a = timed([&] {
      for (int i = 0; i < steps; ++i) {
        plain_optimizer.zero_grad();
        torch::Tensor loss;
        {
          PlainAutocast autocast(precision == "bf16");
          loss = torch::mse_loss(plain_model->forward(x), y);
        }
        loss.backward();
        plain_optimizer.step();
      }
    });
    const double b = timed([&] {
      for (int i = 0; i < steps; ++i) {
        auto scope = accelerator.accumulate(model);
        optimizer.zero_grad();
        accelerator.backward(torch::mse_loss(model->forward(x), y));
        if (path == "foreach") {
          // No option picks the foreach ops where the fused kernel suits: called directly, as
          // the prepared step would (one process, no scaler, a synchronising step).
          accel::detail::multi_tensor_step(optimizer, accel::detail::StepKernel::foreach);
        } else {
          optimizer.step();
        }
      }
    });
    if (round < 2) continue;
    plain.push_back(a / steps);
    accelerated.push_back(b / steps);
  }
  const double plain_ms = accel_bench::median(plain) * 1e3;
  const double accel_ms = accel_bench::median(accelerated) * 1e3;
  std::printf("| %s | %s | %s | %.3f ms | %.3f ms | %.2f |\n", model_name.c_str(),
              precision == "no" ? "fp32" : precision.c_str(), path.c_str(), plain_ms, accel_ms,
              accel_ms / plain_ms);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device" && i + 1 < argc) {
      device = torch::Device(argv[++i]);
    } else {
      rounds = std::atoi(argv[i]);
    }
  }
  if (device.is_cuda())
    device = torch::Device(torch::kCUDA, device.has_index() ? device.index() : 0);
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(device.is_cpu()));
  std::printf("on %s, median of %d rounds; %d thread(s)\n", device.str().c_str(), rounds,
              torch::get_num_threads());
  // "fused step" is the prepared optimizer's: on the CPU accel's exact kernels (bit for bit
  // LibTorch's step), on CUDA ATen's fused kernels; "ATen's fused" is ATen's fused kernels on the
  // CPU, which the prepared step took before the exact kernels (not LibTorch's rounding).
  std::printf(
      "| model | optimizer | LibTorch's step | fused step | fused / LibTorch | ATen's fused | "
      "ATen's fused / LibTorch | foreach step | foreach / LibTorch |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (auto [model, width, depth] :
       {std::tuple<const char*, int64_t, int64_t>{"4 x 2048", 2048, 4}, {"3 x 256", 256, 3}}) {
    compare<torch::optim::AdamW>(accelerator, model, width, depth, "AdamW",
                                 torch::optim::AdamWOptions(1e-3), rounds);
    compare<torch::optim::Adam>(accelerator, model, width, depth, "Adam",
                                torch::optim::AdamOptions(1e-3), rounds);
    compare<torch::optim::SGD>(accelerator, model, width, depth, "SGD momentum 0.9",
                               torch::optim::SGDOptions(1e-2).momentum(0.9), rounds);
  }
  if (!handover_share.empty()) {
    std::printf("handing LibTorch's step counts to the kernels: at most %.1f%% of a fused step\n",
                100 * *std::max_element(handover_share.begin(), handover_share.end()));
  }
  std::printf(
      "\nwhole training step, AdamW, batch 64: the plain loop steps with LibTorch's AdamW\n");
  std::printf(
      "| model | precision | accel's step | plain LibTorch loop | accel | accel / plain |\n");
  std::printf("|---|---|---|---|---|---|\n");
  // bf16 on the CPU autocasts too, but nobody trains a 2048-wide MLP so: rows for GPUs.
  const std::vector<std::string> precisions =
      device.is_cuda() ? std::vector<std::string>{"no", "bf16"} : std::vector<std::string>{"no"};
  for (const auto& precision : precisions) {
    for (const char* path : {"fused", "foreach", "LibTorch's"}) {
      if (device.is_cpu() && std::string(path) == "foreach") continue;  // CPU steps never take it
      whole_step("4 x 2048", 2048, 4, precision, path, rounds);
      whole_step("3 x 256", 256, 3, precision, path, rounds);
    }
  }
  return 0;
}
