// Prepared AdamW, Adam and SGD step through ATen's fused kernels: the same update as LibTorch's own
// step to float rounding, on LibTorch's own state, for every option that maps onto the kernels.

#include <accel/accel.h>
#include <accel/detail/fused_step.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

namespace {

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
  ASSERT_TRUE(accel::detail::fused_step(direct)) << label;
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

TEST(FusedOptimizer, UnsuitableTensorsTakeLibTorchsStep) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  // A non-contiguous gradient: the kernel is not used, LibTorch's step is, bit for bit.
  auto reference = parameters(11);
  auto params = copies(reference);
  for (auto* list : {&reference, &params}) {
    auto& grad = (*list)[0].mutable_grad();
    grad = grad.t().contiguous().t();
    ASSERT_FALSE(grad.is_contiguous());
  }
  torch::optim::SGD plain(reference, torch::optim::SGDOptions(0.1).momentum(0.9));
  auto prepared =
      accelerator.prepare(torch::optim::SGD(params, torch::optim::SGDOptions(0.1).momentum(0.9)));
  plain.step();
  prepared.step();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], reference[i]));
}

}  // namespace
