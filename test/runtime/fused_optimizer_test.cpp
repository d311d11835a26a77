// Prepared AdamW, Adam and SGD step through ATen's fused kernels (or, off the CPU, its foreach ops
// where a tensor does not suit the kernel): the same update as LibTorch's own step to float
// rounding, on LibTorch's own state, for every option that maps onto the kernels; with fp16 loss
// scaling the fused kernel can divide the scale out itself (the CUDA path).

#include <accel/accel.h>
#include <accel/detail/multi_tensor_step.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <limits>
#include <memory>

namespace {

using accel::detail::StepKernel;

/// Parameters of several shapes (a matrix, a vector, a scalar), with fixed gradients.
std::vector<torch::Tensor> parameters(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> params = {torch::randn({33, 17}), torch::randn({17}),
                                       torch::randn({})};
  for (auto& p : params) {
    p.requires_grad_(true);
    p.mutable_grad() = torch::randn_like(p);
  }
  return params;
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) {
    auto copy = p.detach().clone().requires_grad_(true);
    if (p.grad().defined()) copy.mutable_grad() = p.grad().clone();
    out.push_back(copy);
  }
  return out;
}

/// Largest difference relative to the larger magnitude of the two (1e-30 floor).
double relative_difference(const std::vector<torch::Tensor>& a,
                           const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto scale = torch::maximum(a[i].detach().abs(), b[i].detach().abs()).clamp_min(1e-30);
    worst = std::max(worst, ((a[i] - b[i]).abs() / scale).max().item<double>());
  }
  return worst;
}

template <typename O, typename Options>
void expect_one_step_matches(const Options& options, const std::string& label) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  auto reference = parameters(7);
  auto fused_params = copies(reference);
  auto kernel_params = copies(reference);
  O plain(reference, options);
  auto prepared = accelerator.prepare(O(fused_params, options));
  O direct(kernel_params, options);
  ASSERT_TRUE(prepared.fused()) << label;
  plain.step();
  prepared.step();
  ASSERT_EQ(accel::detail::step_kernel(direct), StepKernel::fused) << label;
  accel::detail::multi_tensor_step(direct, StepKernel::fused);
  EXPECT_LE(relative_difference(reference, fused_params), 1e-6) << label;
  // The prepared optimizer's step is the kernel's.
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_TRUE(torch::equal(fused_params[i], kernel_params[i])) << label;
  }
  // The state is LibTorch's own: LibTorch's step carries on from it as from its own.
  for (size_t i = 0; i < reference.size(); ++i) {
    fused_params[i].mutable_grad() = reference[i].grad().clone();
  }
  plain.step();
  prepared.O::step();
  EXPECT_LE(relative_difference(reference, fused_params), 1e-5) << label;
  EXPECT_EQ(plain.state().size(), prepared.state().size()) << label;
}

/// The foreach path: LibTorch's arithmetic op by op, so the same result as LibTorch's step.
template <typename O, typename Options>
void expect_foreach_step_matches(const Options& options, const std::string& label) {
  auto reference = parameters(5);
  auto params = copies(reference);
  O plain(reference, options);
  O listed(params, options);
  for (int step = 0; step < 3; ++step) {  // the first step makes the state, later ones carry it
    plain.step();
    accel::detail::multi_tensor_step(listed, StepKernel::foreach);
    EXPECT_LE(relative_difference(reference, params), 1e-6) << label << " step " << step;
  }
  EXPECT_EQ(plain.state().size(), listed.state().size()) << label;
}

TEST(FusedOptimizer, ForeachPathMatchesLibTorch) {
  using namespace torch::optim;
  expect_foreach_step_matches<AdamW>(AdamWOptions(1e-2).weight_decay(0.1), "adamw");
  expect_foreach_step_matches<AdamW>(AdamWOptions(1e-2).amsgrad(true), "adamw amsgrad");
  expect_foreach_step_matches<Adam>(AdamOptions(1e-2).weight_decay(0.05), "adam L2");
  expect_foreach_step_matches<Adam>(AdamOptions(1e-2).amsgrad(true), "adam amsgrad");
  expect_foreach_step_matches<SGD>(SGDOptions(0.1), "sgd");
  expect_foreach_step_matches<SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.1), "dampening");
  expect_foreach_step_matches<SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01),
                                   "nesterov decay");
}

TEST(FusedOptimizer, AdamWMatchesLibTorch) {
  using torch::optim::AdamWOptions;
  expect_one_step_matches<torch::optim::AdamW>(AdamWOptions(1e-2), "default");
  expect_one_step_matches<torch::optim::AdamW>(AdamWOptions(1e-2).weight_decay(0.1), "decay");
  expect_one_step_matches<torch::optim::AdamW>(AdamWOptions(1e-2).amsgrad(true), "amsgrad");
  expect_one_step_matches<torch::optim::AdamW>(
      AdamWOptions(3e-3).betas({0.8, 0.99}).eps(1e-6).weight_decay(0), "betas");
}

TEST(FusedOptimizer, AdamMatchesLibTorch) {
  using torch::optim::AdamOptions;
  expect_one_step_matches<torch::optim::Adam>(AdamOptions(1e-2), "default");
  expect_one_step_matches<torch::optim::Adam>(AdamOptions(1e-2).weight_decay(0.05), "L2 decay");
  expect_one_step_matches<torch::optim::Adam>(AdamOptions(1e-2).amsgrad(true), "amsgrad");
}

TEST(FusedOptimizer, SgdMatchesLibTorch) {
  using torch::optim::SGDOptions;
  expect_one_step_matches<torch::optim::SGD>(SGDOptions(0.1), "plain");
  expect_one_step_matches<torch::optim::SGD>(SGDOptions(0.1).weight_decay(0.01), "decay");
  expect_one_step_matches<torch::optim::SGD>(SGDOptions(0.1).momentum(0.9), "momentum");
  expect_one_step_matches<torch::optim::SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.1),
                                             "dampening");
  expect_one_step_matches<torch::optim::SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true),
                                             "nesterov");
}

TEST(FusedOptimizer, SkipsParametersWithoutGradientsAndHonoursEachGroup) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  auto a = parameters(3), b = parameters(4);
  b[1].mutable_grad() = torch::Tensor();  // no gradient: left alone, no state made
  auto a_ref = copies(a), b_ref = copies(b);
  using torch::optim::AdamWOptions;
  auto groups = [](std::vector<torch::Tensor> first, std::vector<torch::Tensor> second) {
    return std::vector<torch::optim::OptimizerParamGroup>{
        torch::optim::OptimizerParamGroup(std::move(first), std::make_unique<AdamWOptions>(1e-2)),
        torch::optim::OptimizerParamGroup(std::move(second), std::make_unique<AdamWOptions>(1e-1))};
  };
  torch::optim::AdamW plain(groups(a_ref, b_ref), AdamWOptions(1e-3));
  auto prepared = accelerator.prepare(torch::optim::AdamW(groups(a, b), AdamWOptions(1e-3)));
  const auto untouched = b[1].detach().clone();
  plain.step();
  prepared.step();
  EXPECT_LE(relative_difference(a, a_ref), 1e-6);
  EXPECT_LE(relative_difference(b, b_ref), 1e-6);
  EXPECT_TRUE(torch::equal(b[1], untouched));
  EXPECT_EQ(prepared.state().count(b[1].unsafeGetTensorImpl()), 0u);
  EXPECT_EQ(prepared.state().size(), 5u);
}

TEST(FusedOptimizer, OffIsLibTorchsOwnStepBitForBit) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true).fused_optimizer(false));
  auto reference = parameters(9);
  auto params = copies(reference);
  torch::optim::AdamW plain(reference, torch::optim::AdamWOptions(1e-2));
  auto prepared =
      accelerator.prepare(torch::optim::AdamW(params, torch::optim::AdamWOptions(1e-2)));
  EXPECT_FALSE(prepared.fused());
  plain.step();
  prepared.step();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], reference[i]));
}

TEST(FusedOptimizer, NonContiguousCpuTensorsTakeLibTorchsStep) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  // A transposed parameter and gradient: not for the fused kernel; on the CPU the foreach ops are
  // slower than LibTorch's step, so LibTorch's step it is, bit for bit.
  auto reference = parameters(11);
  reference[0] = reference[0].detach().t().contiguous().t().requires_grad_(true);
  reference[0].mutable_grad() = torch::randn({33, 17}).t().contiguous().t();
  ASSERT_FALSE(reference[0].is_contiguous());
  auto params = copies(reference);
  params[0] = params[0].detach().t().contiguous().t().requires_grad_(true);
  params[0].mutable_grad() = reference[0].grad().t().contiguous().t();
  ASSERT_FALSE(params[0].is_contiguous());
  using torch::optim::AdamWOptions;
  torch::optim::AdamW plain(reference, AdamWOptions(1e-2).weight_decay(0.1));
  auto prepared =
      accelerator.prepare(torch::optim::AdamW(params, AdamWOptions(1e-2).weight_decay(0.1)));
  EXPECT_TRUE(prepared.fused());
  EXPECT_EQ(accel::detail::step_kernel(prepared), StepKernel::none);
  plain.step();
  prepared.step();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], reference[i]));
}

TEST(FusedOptimizer, SparseGradientsTakeLibTorchsStep) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  auto reference = parameters(12);
  auto params = copies(reference);
  for (auto* list : {&reference, &params}) {
    auto& grad = (*list)[1].mutable_grad();
    grad = torch::sparse_coo_tensor(torch::tensor({{2, 5}}), torch::tensor({1.5f, -2.0f}), {17});
  }
  torch::optim::SGD plain(reference, torch::optim::SGDOptions(0.1));
  auto prepared = accelerator.prepare(torch::optim::SGD(params, torch::optim::SGDOptions(0.1)));
  EXPECT_EQ(accel::detail::step_kernel(prepared), StepKernel::none);
  plain.step();
  prepared.step();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], reference[i]));
}

/// The state of an Accelerator with an fp16 loss scaler, as Accelerator::prepare gives its
/// optimizers with mixed_precision "fp16" (which needs CUDA; the scaler's arithmetic is the same on
/// the CPU).
std::shared_ptr<accel::detail::GradientState> scaled_state(double scale) {
  auto state = std::make_shared<accel::detail::GradientState>();
  state->scaler = std::make_shared<accel::GradScaler>(accel::GradScalerOptions().init_scale(scale));
  return state;
}

TEST(FusedOptimizer, ScaledStepUnscalesThenStepsFused) {
  const double scale = 1024;
  auto reference = parameters(13);
  auto params = copies(reference);
  for (auto& p : params)
    p.mutable_grad().mul_(scale);  // as backward() of a scaled loss leaves them
  using torch::optim::AdamWOptions;
  torch::optim::AdamW plain(reference, AdamWOptions(1e-2).weight_decay(0.1));
  auto state = scaled_state(scale);
  accel::AcceleratedOptimizer<torch::optim::AdamW> prepared(
      torch::optim::AdamW(params, AdamWOptions(1e-2).weight_decay(0.1)), state);
  ASSERT_EQ(accel::detail::step_kernel(prepared), StepKernel::fused);
  plain.step();
  prepared.step();
  EXPECT_FALSE(state->optimizer_step_was_skipped);
  EXPECT_LE(relative_difference(reference, params), 1e-6);
  // The gradients are left unscaled, as PyTorch's GradScaler leaves them.
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(params[i].grad(), reference[i].grad())) << i;
  }
}

TEST(FusedOptimizer, InfGradientSkipsTheFusedStepAndLeavesEverything) {
  auto params = parameters(14);
  params[2].mutable_grad().fill_(std::numeric_limits<float>::infinity());
  auto before = copies(params);
  auto expect_untouched = [&](const torch::optim::Optimizer& optimizer, const std::string& label) {
    EXPECT_TRUE(optimizer.state().empty()) << label;  // no momentum buffer made
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(torch::equal(params[i], before[i])) << label;
  };
  // The scaler's pass unscales and finds the inf; the fused step is skipped.
  auto state = scaled_state(512);
  accel::AcceleratedOptimizer<torch::optim::SGD> prepared(
      torch::optim::SGD(params, torch::optim::SGDOptions(0.1).momentum(0.9)), state);
  ASSERT_EQ(accel::detail::step_kernel(prepared), StepKernel::fused);
  prepared.step();
  EXPECT_TRUE(state->optimizer_step_was_skipped);
  EXPECT_EQ(state->scaler->get_scale(), 256);
  expect_untouched(prepared, "prepared");
}

TEST(FusedOptimizer, DebugLogSaysWhichPathEachOptimizerTakes) {
  ::setenv("ACCEL_DEBUG", "1", 1);
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  ::unsetenv("ACCEL_DEBUG");
  auto contiguous = parameters(16);
  auto transposed = parameters(17);
  transposed[0] = transposed[0].detach().t().requires_grad_(true);
  using namespace torch::optim;
  auto log_of = [&](const std::function<void()>& prepare) {
    testing::internal::CaptureStderr();
    prepare();
    return testing::internal::GetCapturedStderr();
  };
  EXPECT_NE(log_of([&] {
              accelerator.prepare(AdamW(contiguous, AdamWOptions(1e-3)));
            }).find("torch::optim::AdamW steps through ATen's fused kernel"),
            std::string::npos);
  EXPECT_NE(log_of([&] { accelerator.prepare(SGD(transposed, SGDOptions(0.1))); })
                .find("torch::optim::SGD steps with its own per-parameter step (a parameter suits "
                      "neither"),
            std::string::npos);
  EXPECT_NE(log_of([&] {
              accelerator.prepare(RMSprop(contiguous, RMSpropOptions(1e-3)));
            }).find("RMSprop steps with its own per-parameter step (only AdamW, Adam and SGD"),
            std::string::npos);
}

TEST(FusedOptimizer, BadOptionsGetLibTorchsOwnErrors) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  auto params = parameters(15);
  using namespace torch::optim;
  auto message = [](const std::function<void()>& make) -> std::string {
    try {
      make();
    } catch (const c10::Error& error) {
      return error.msg();
    }
    return "no error";
  };
  // LibTorch checks options when the optimizer is built, before prepare() sees it.
  EXPECT_NE(message([&] {
              accelerator.prepare(AdamW(params, AdamWOptions(-1e-3)));
            }).find("Invalid learning rate: -0.001"),
            std::string::npos);
  EXPECT_NE(message([&] {
              accelerator.prepare(Adam(params, AdamOptions(1e-3).betas({1.0, 0.9})));
            }).find("Invalid beta parameter at index 0: 1"),
            std::string::npos);
  EXPECT_NE(message([&] {
              accelerator.prepare(SGD(params, SGDOptions(0.1).nesterov(true)));
            }).find("Nesterov momentum requires a momentum and zero dampening"),
            std::string::npos);
  // Options changed after construction are not checked again by LibTorch's step; the kernels do
  // not second-guess them either: the same update as LibTorch's.
  auto reference = copies(params);
  AdamW plain(reference, AdamWOptions(1e-2));
  auto prepared = accelerator.prepare(AdamW(params, AdamWOptions(1e-2)));
  static_cast<AdamWOptions&>(plain.param_groups()[0].options()).lr(-1e-2);
  static_cast<AdamWOptions&>(prepared.param_groups()[0].options()).lr(-1e-2);
  plain.step();
  prepared.step();
  EXPECT_LE(relative_difference(reference, params), 1e-6);
}

}  // namespace
