// Prepared AdamW, Adam and SGD step through accel's exact kernels on the CPU (bit for bit
// LibTorch's own step, parameters and state, for every option) and ATen's fused kernels on CUDA (or
// its foreach ops where a tensor does not suit them), on LibTorch's own state; with fp16 loss
// scaling the scaler unscales first.

#include <accel/accel.h>
#include <accel/detail/multi_tensor_step.h>
#include "optim/training_loop.h"

#include "optim/exact_cpu_step.h"
#include "optim/exact_step_check.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <dlfcn.h>
#include <cstring>
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

/// Parameters of awkward sizes: 1, 7, 1023 and 4097 elements (vector bodies of every width and
/// scalar tails), and a 33 x 17 matrix whose gradients are strided (transposed).
std::vector<torch::Tensor> awkward_parameters(torch::ScalarType dtype) {
  torch::manual_seed(21);
  std::vector<torch::Tensor> params;
  for (const int64_t size : {1, 7, 1023, 4097}) params.push_back(torch::randn({size}, dtype));
  params.push_back(torch::randn({33, 17}, dtype));
  for (auto& p : params) p.requires_grad_(true);
  return params;
}

/// The same fresh gradients for both lists; the matrix's is transposed, not contiguous.
void set_gradients(std::vector<torch::Tensor>& a, std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    auto grad = a[i].dim() == 2 ? torch::randn({a[i].size(1), a[i].size(0)}, a[i].options()).t()
                                : torch::randn_like(a[i]);
    a[i].mutable_grad() = grad;
    b[i].mutable_grad() = grad.clone();
  }
}

/// Equal bytes: one ulp apart fails (a tolerance would not).
testing::AssertionResult same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return testing::AssertionFailure() << "one is undefined";
  if (!a.defined()) return testing::AssertionSuccess();
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) {
    return testing::AssertionFailure() << "shapes or dtypes differ";
  }
  const auto x = a.detach().contiguous(), y = b.detach().contiguous();
  if (std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0) return testing::AssertionSuccess();
  const auto differ = (x != y).nonzero();
  const int64_t at = differ[0].item<int64_t>();
  return testing::AssertionFailure()
         << differ.size(0) << " elements differ, first at " << at << ": LibTorch "
         << x.view({-1})[at].item<double>() << ", accel " << y.view({-1})[at].item<double>();
}

testing::AssertionResult same_state(const torch::optim::OptimizerParamState& a,
                                    const torch::optim::OptimizerParamState& b) {
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&a)) {
    return same_bytes(sgd->momentum_buffer(),
                      static_cast<const torch::optim::SGDParamState&>(b).momentum_buffer());
  }
  auto adam_like = [](const auto& x, const auto& y) {
    if (x.step() != y.step()) return testing::AssertionFailure() << "step counts differ";
    for (auto result :
         {same_bytes(x.exp_avg(), y.exp_avg()), same_bytes(x.exp_avg_sq(), y.exp_avg_sq()),
          same_bytes(x.max_exp_avg_sq(), y.max_exp_avg_sq())}) {
      if (!result) return result;
    }
    return testing::AssertionSuccess();
  };
  if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(&a)) {
    return adam_like(*adam, static_cast<const torch::optim::AdamParamState&>(b));
  }
  return adam_like(static_cast<const torch::optim::AdamWParamState&>(a),
                   static_cast<const torch::optim::AdamWParamState&>(b));
}

/// 100 steps of LibTorch's own optimizer and of the prepared one (accel's exact CPU kernels,
/// which must be the path taken) from the same start with the same gradients: after every step,
/// every parameter and every state tensor holds the same bytes.
template <typename O, typename Options>
void expect_bitwise_libtorch(const Options& options, const std::string& label,
                             torch::ScalarType dtype = torch::kFloat) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  auto reference = awkward_parameters(dtype);
  auto params = copies(reference);
  O plain(reference, options);
  auto prepared = accelerator.prepare(O(params, options));
  ASSERT_TRUE(prepared.fused()) << label;
  for (int step = 1; step <= 100; ++step) {
    set_gradients(reference, params);
    // The exact kernels, proven in this process; a build whose compiler fuses what ATen rounds
    // twice is refused here (and would differ below if it were not).
    ASSERT_EQ(accel::detail::step_kernel(prepared), StepKernel::fused)
        << label << ": " << accel::optim::exact_cpu_step_refusal(prepared);
    plain.step();
    prepared.step();
    for (size_t i = 0; i < reference.size(); ++i) {
      ASSERT_TRUE(same_bytes(reference[i], params[i]))
          << label << ", step " << step << ", parameter " << i;
      const auto expected = plain.state().find(reference[i].unsafeGetTensorImpl());
      const auto got = prepared.state().find(params[i].unsafeGetTensorImpl());
      ASSERT_EQ(expected == plain.state().end(), got == prepared.state().end()) << label;
      if (expected == plain.state().end()) continue;  // SGD without momentum keeps none
      ASSERT_TRUE(same_state(*expected->second, *got->second))
          << label << ", step " << step << ", state of parameter " << i;
    }
  }
}

TEST(FusedOptimizer, SgdIsLibTorchsStepBitForBit) {
  using torch::optim::SGD;
  using torch::optim::SGDOptions;
  expect_bitwise_libtorch<SGD>(SGDOptions(0.1), "plain");
  expect_bitwise_libtorch<SGD>(SGDOptions(0.1).weight_decay(0.01), "decay");
  expect_bitwise_libtorch<SGD>(SGDOptions(0.01).momentum(0.9), "momentum");
  expect_bitwise_libtorch<SGD>(SGDOptions(0.01).momentum(0.9).dampening(0.1), "dampening");
  expect_bitwise_libtorch<SGD>(SGDOptions(0.01).momentum(0.9).nesterov(true), "nesterov");
  expect_bitwise_libtorch<SGD>(
      SGDOptions(0.01).momentum(0.9).dampening(0.2).weight_decay(1e-3).nesterov(false),
      "momentum, dampening and decay");
  expect_bitwise_libtorch<SGD>(SGDOptions(0.01).momentum(0.9).nesterov(true).weight_decay(1e-3),
                               "nesterov and decay");
  expect_bitwise_libtorch<SGD>(SGDOptions(0.01).momentum(0.9).weight_decay(1e-3), "double",
                               torch::kDouble);
}

TEST(FusedOptimizer, AdamIsLibTorchsStepBitForBit) {
  using torch::optim::Adam;
  using torch::optim::AdamOptions;
  expect_bitwise_libtorch<Adam>(AdamOptions(1e-2), "default");
  expect_bitwise_libtorch<Adam>(AdamOptions(1e-2).weight_decay(0.05), "L2 decay");
  expect_bitwise_libtorch<Adam>(AdamOptions(1e-2).amsgrad(true), "amsgrad");
  expect_bitwise_libtorch<Adam>(AdamOptions(3e-3).amsgrad(true).weight_decay(0.05),
                                "amsgrad and decay");
  expect_bitwise_libtorch<Adam>(AdamOptions(3e-3).betas({0.8, 0.99}).eps(1e-6), "betas");
  expect_bitwise_libtorch<Adam>(AdamOptions(1e-2).amsgrad(true), "double", torch::kDouble);
}

TEST(FusedOptimizer, AdamWIsLibTorchsStepBitForBit) {
  using torch::optim::AdamW;
  using torch::optim::AdamWOptions;
  expect_bitwise_libtorch<AdamW>(AdamWOptions(1e-2), "default (decay 1e-2)");
  expect_bitwise_libtorch<AdamW>(AdamWOptions(1e-2).weight_decay(0), "no decay");
  expect_bitwise_libtorch<AdamW>(AdamWOptions(1e-2).weight_decay(0.1).amsgrad(true),
                                 "amsgrad and decay");
  expect_bitwise_libtorch<AdamW>(AdamWOptions(3e-3).betas({0.8, 0.99}).eps(1e-6).weight_decay(0),
                                 "betas");
  expect_bitwise_libtorch<AdamW>(AdamWOptions(1e-2).weight_decay(0.1), "double", torch::kDouble);
}

TEST(FusedOptimizer, KernelsAreProvenOncePerKindAndSayWhyNot) {
  // A kind of update the kernels do not take (half parameters on the CPU) keeps LibTorch's step,
  // and the refusal names it.
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  std::vector<torch::Tensor> half = {torch::randn({8}).to(torch::kHalf).requires_grad_(true)};
  half[0].mutable_grad() = torch::randn({8}).to(torch::kHalf);
  auto prepared = accelerator.prepare(torch::optim::SGD(half, torch::optim::SGDOptions(0.1)));
  EXPECT_EQ(accel::detail::step_kernel(prepared), StepKernel::none);
  EXPECT_NE(accel::optim::exact_cpu_step_refusal(prepared).find("Half"), std::string::npos)
      << accel::optim::exact_cpu_step_refusal(prepared);
  // Proving leaves the program's random stream where it was.
  torch::manual_seed(5);
  const auto expected = torch::rand({4});
  torch::manual_seed(5);
  std::vector<torch::Tensor> fresh = {torch::randn({8}, torch::kDouble).requires_grad_(true)};
  torch::manual_seed(5);
  accelerator.prepare(
      torch::optim::Adam(fresh, torch::optim::AdamOptions(1).amsgrad(true).weight_decay(0.5)));
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
}

// Where this LibTorch has MKL's vector sqrt (the x86 wheels), Adam's square roots come from it
// straight, without an ATen op a block: the probe found its bytes equal to at::sqrt's. (The
// bitwise tests above hold the whole step to LibTorch's either way.)
TEST(FusedOptimizer, SquareRootsComeStraightFromMklWhereAtenHasIt) {
  if (dlsym(RTLD_DEFAULT, "vmsSqrt") == nullptr || dlsym(RTLD_DEFAULT, "vmdSqrt") == nullptr) {
    GTEST_SKIP() << "this LibTorch has no MKL: the kernels call at::sqrt_out";
  }
  EXPECT_TRUE(accel::optim::direct_square_roots(torch::kFloat));
  EXPECT_TRUE(accel::optim::direct_square_roots(torch::kDouble));
  EXPECT_FALSE(accel::optim::direct_square_roots(torch::kHalf));
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

TEST(FusedOptimizer, NonContiguousCpuParametersTakeLibTorchsStep) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  // A transposed parameter: not for the exact kernels (they write parameters as one block); on
  // the CPU the foreach ops are slower than LibTorch's step, so LibTorch's step it is.
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
std::shared_ptr<accel::detail::TrainingLoop> scaled_state(double scale) {
  auto state = std::make_shared<accel::detail::TrainingLoop>();
  state->optimizers.set_scaler(
      std::make_shared<accel::GradScaler>(accel::GradScalerOptions().init_scale(scale)));
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
  EXPECT_FALSE(state->sync.step_was_skipped());
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
  EXPECT_TRUE(state->sync.step_was_skipped());
  EXPECT_EQ(state->optimizers.scaler()->get_scale(), 256);
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
  EXPECT_NE(
      log_of([&] {
        accelerator.prepare(AdamW(contiguous, AdamWOptions(1e-3)));
      }).find("torch::optim::AdamW steps through fused kernels (on the CPU accel's, bit for bit"),
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
