// FP8 training on the CPU, whose _scaled_mm computes what CUDA's does (per-tensor scales; the
// row-wise recipe applies its scales around a unit-scale product): a converted Linear against an
// emulation written here (quantise-dequantise in fp32, then the fp32 matmul), the routes a
// Linear's forward takes, the selection of Linears, the Accelerator's fp8 mode, and a small
// transformer trained in fp8 against bf16.

#include <accel/accel.h>

#include "precision/fp8_linear.h"
#include "support/env_guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace {

using accel::precision::Fp8Recipe;

constexpr double kE4m3Max = 448.0;
constexpr double kE5m2Max = 57344.0;

/// x cast to FP8 and back, written out as torchao does it: a factor max/amax (rounded down to a
/// power of two for the row-wise recipe), per tensor or along `dim`, saturated before the cast.
torch::Tensor emulate_cast(const torch::Tensor& x, torch::ScalarType fp8, double max, int64_t dim,
                           bool power_of_2) {
  const auto values = x.to(torch::kFloat);
  auto amax = dim < 0 ? values.abs().max() : values.abs().amax({dim}, true);
  auto factor = max / amax.clamp_min(1e-12);
  if (power_of_2) factor = torch::exp2(torch::floor(torch::log2(factor)));
  return (values * factor).clamp(-max, max).to(fp8).to(torch::kFloat) / factor;
}

/// max |a - b| relative to the fp32 accumulation bound of a K-long product of `bound_product`
/// (|A|·|B|): a difference of the accumulation's rounding stays below 1.
double relative_to_bound(const torch::Tensor& a, const torch::Tensor& b,
                         const torch::Tensor& bound_product, int64_t k) {
  const double eps = std::ldexp(1.0, -23);
  const auto bound = bound_product * (2.0 * static_cast<double>(k) * eps) + 1e-30;
  return ((a.to(torch::kFloat) - b.to(torch::kFloat)).abs() / bound).max().item<double>();
}

struct Emulated {
  torch::Tensor output, grad_input, grad_weight, bound_output, bound_input, bound_weight;
};

Emulated emulate(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& g,
                 Fp8Recipe recipe) {
  Emulated e;
  const bool rowwise = recipe == Fp8Recipe::Rowwise;
  const auto grad_format = rowwise ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2;
  const double grad_max = rowwise ? kE4m3Max : kE5m2Max;
  // Forward: x and w scaled along the in-features (rows of each).
  const auto xq = emulate_cast(x, torch::kFloat8_e4m3fn, kE4m3Max, rowwise ? 1 : -1, rowwise);
  const auto wq = emulate_cast(w, torch::kFloat8_e4m3fn, kE4m3Max, rowwise ? 1 : -1, rowwise);
  e.output = xq.matmul(wq.t());
  e.bound_output = xq.abs().matmul(wq.abs().t());
  // Input gradient: g along the out-features, w along them too (its columns).
  const auto gq_rows = emulate_cast(g, grad_format, grad_max, rowwise ? 1 : -1, rowwise);
  const auto wq_cols = emulate_cast(w, torch::kFloat8_e4m3fn, kE4m3Max, rowwise ? 0 : -1, rowwise);
  e.grad_input = gq_rows.matmul(wq_cols);
  e.bound_input = gq_rows.abs().matmul(wq_cols.abs());
  // Weight gradient: g and x along the rows (tokens).
  const auto gq_cols = emulate_cast(g, grad_format, grad_max, rowwise ? 0 : -1, rowwise);
  const auto xq_cols = emulate_cast(x, torch::kFloat8_e4m3fn, kE4m3Max, rowwise ? 0 : -1, rowwise);
  e.grad_weight = gq_cols.t().matmul(xq_cols);
  e.bound_weight = gq_cols.abs().t().matmul(xq_cols.abs());
  return e;
}

class Fp8Recipes : public ::testing::TestWithParam<Fp8Recipe> {};

TEST_P(Fp8Recipes, ALinearEqualsItsEmulation) {
  torch::manual_seed(0);
  // Values over several orders of magnitude, rows of different ranges: the row-wise scales
  // differ from the tensor's.
  const auto x =
      (torch::randn({48, 64}) * torch::logspace(-2, 2, 48).unsqueeze(1)).requires_grad_(true);
  const auto w = (torch::randn({32, 64}) * 0.1).requires_grad_(true);
  const auto g = torch::randn({48, 32}) * torch::logspace(-3, 1, 48).unsqueeze(1);
  const auto out = accel::precision::fp8_linear(x, w, std::nullopt, GetParam());
  out.backward(g);
  torch::NoGradGuard no_grad;
  const auto e = emulate(x.detach(), w.detach(), g, GetParam());
  EXPECT_LE(relative_to_bound(out, e.output, e.bound_output, 64), 1.0);
  EXPECT_LE(relative_to_bound(x.grad(), e.grad_input, e.bound_input, 32), 1.0);
  EXPECT_LE(relative_to_bound(w.grad(), e.grad_weight, e.bound_weight, 48), 1.0);
  // Not the fp32 product: FP8's three mantissa bits show.
  const auto exact = x.detach().matmul(w.detach().t());
  EXPECT_GT((out - exact).abs().max().item<double>(), 1e-3 * exact.abs().max().item<double>());
  EXPECT_EQ(x.grad().scalar_type(), torch::kFloat);
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
}

INSTANTIATE_TEST_SUITE_P(Fp8, Fp8Recipes,
                         ::testing::Values(Fp8Recipe::Tensorwise, Fp8Recipe::Rowwise),
                         [](const auto& info) { return accel::to_string(info.param); });

TEST(Fp8, CastsSaturateAndRoundTheirScalesAsTorchao) {
  const auto x = torch::tensor({{-3.0f, 1.0f}, {0.5f, 0.0f}});
  const auto tensorwise = accel::precision::quantize_fp8(x, torch::kFloat8_e4m3fn);
  EXPECT_FLOAT_EQ(tensorwise.scale.item<float>(), 3.0f / 448.0f);
  EXPECT_FLOAT_EQ(tensorwise.dequantized()[0][0].item<float>(), -3.0f);
  const auto rows = accel::precision::quantize_fp8(x, torch::kFloat8_e4m3fn, 1, true);
  // Row 0: 448/3 rounds down to 128, a scale of 1/128; row 1: 448/0.5 = 896 down to 512.
  EXPECT_EQ(rows.scale.sizes(), (std::vector<int64_t>{2, 1}));
  EXPECT_FLOAT_EQ(rows.scale[0][0].item<float>(), 1.0f / 128.0f);
  EXPECT_FLOAT_EQ(rows.scale[1][0].item<float>(), 1.0f / 512.0f);
  // A zero tensor casts to zeros (amax clamped), not NaN.
  const auto zeros = accel::precision::quantize_fp8(torch::zeros({4}), torch::kFloat8_e5m2);
  EXPECT_TRUE(zeros.dequantized().eq(0).all().item<bool>());
}

/// Three Linears, the middle one converted by name; `forward` takes the route given.
struct ThreeLinears {
  torch::nn::Sequential model{torch::nn::Linear(32, 64), torch::nn::Linear(64, 48),
                              torch::nn::Linear(48, 16)};
  ThreeLinears() { accel::convert_to_fp8(*model, accel::Fp8Options().modules({"1"})); }
  torch::nn::LinearImpl& middle() { return *model[1]->as<torch::nn::Linear>(); }
};

TEST(Fp8, EveryRouteOfALinearsForwardComputesInFp8InsideTheScopeOnly) {
  torch::manual_seed(1);
  ThreeLinears net;
  auto& middle = net.middle();
  ASSERT_TRUE(accel::is_fp8_converted(middle.weight));
  EXPECT_FALSE(accel::is_fp8_converted(net.model[0]->as<torch::nn::Linear>()->weight));
  const auto x2 = torch::randn({16, 64});
  const auto x3 = torch::randn({4, 5, 64});
  const auto bias = middle.bias;
  torch::NoGradGuard no_grad;
  const auto expected2 = accel::precision::fp8_linear(x2.to(torch::kBFloat16), middle.weight, bias,
                                                      Fp8Recipe::Tensorwise);
  // A 3-D input goes through matmul, and LinearImpl adds the bias in place (in fp32, rounded).
  auto expected3 = accel::precision::fp8_linear(x3.to(torch::kBFloat16), middle.weight,
                                                std::nullopt, Fp8Recipe::Tensorwise);
  expected3 += bias;
  torch::Tensor bf16_2;
  {
    accel::AutocastGuard bf16(torch::kCPU, torch::kBFloat16);
    bf16_2 = middle.forward(x2);
  }
  accel::AutocastGuard fp8(torch::kCPU, torch::kBFloat16, std::nullopt, /*fp8=*/true);
  // addmm (2-D input with a bias), matmul + bias (3-D), and a direct torch::linear.
  const auto via_addmm = middle.forward(x2);
  const auto via_matmul = middle.forward(x3);
  const auto via_linear = torch::linear(x2, middle.weight, bias);
  EXPECT_EQ(via_addmm.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(via_addmm, expected2));
  EXPECT_TRUE(torch::equal(via_matmul, expected3));
  EXPECT_TRUE(torch::equal(via_linear, expected2));
  // FP8 is not bf16: a test that passes when nothing is converted cannot pass here.
  EXPECT_FALSE(torch::allclose(via_addmm.to(torch::kFloat), bf16_2.to(torch::kFloat), 0, 1e-3));
  // A Linear not converted computes as bf16 autocast does.
  auto& first = *net.model[0]->as<torch::nn::Linear>();
  const auto x_first = torch::randn({16, 32});
  const auto in_scope = first.forward(x_first);
  torch::Tensor plain_bf16;
  {
    accel::AutocastGuard bf16(torch::kCPU, torch::kBFloat16);
    plain_bf16 = first.forward(x_first);
  }
  EXPECT_TRUE(torch::equal(in_scope, plain_bf16));
}

TEST(Fp8, TheDefaultFilterLeavesTheEndsAndOddSizesOut) {
  torch::nn::Sequential model(torch::nn::Linear(16, 32), torch::nn::Linear(32, 32),
                              torch::nn::Linear(32, 20), torch::nn::Linear(20, 32),
                              torch::nn::Linear(32, 48), torch::nn::Linear(48, 16));
  EXPECT_EQ(accel::convert_to_fp8(*model), (std::vector<std::string>{"1", "4"}));
  torch::nn::Sequential other(torch::nn::Linear(16, 32), torch::nn::Linear(32, 32),
                              torch::nn::Linear(32, 16));
  const auto chosen = accel::convert_to_fp8(
      *other,
      accel::Fp8Options().module_filter(
          [](const std::string& name, const torch::nn::LinearImpl&) { return name != "1"; }));
  EXPECT_EQ(chosen, (std::vector<std::string>{"0", "2"}));
}

std::string conversion_error(torch::nn::Module& model, const accel::Fp8Options& options) {
  try {
    accel::convert_to_fp8(model, options);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(Fp8, BadSelectionsAreNamed) {
  torch::nn::Sequential model(torch::nn::Linear(16, 32), torch::nn::Linear(32, 20));
  // A recipe named in code is parsed where it is set.
  std::string error;
  try {
    accel::Fp8Options().recipe("blockwise");
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  }
  EXPECT_NE(error.find("Fp8Options.recipe 'blockwise' is not an FP8 recipe; choices: "
                       "tensorwise, rowwise"),
            std::string::npos)
      << error;
  error = conversion_error(*model, accel::Fp8Options().modules({"1"}));
  EXPECT_NE(error.find("Fp8Options.modules names '1' (in_features 32, out_features 20): FP8 "
                       "matmuls need both multiples of 16"),
            std::string::npos)
      << error;
  error = conversion_error(*model, accel::Fp8Options().modules({"2"}));
  EXPECT_NE(error.find("names '2', which is not a Linear of the model; its Linears: 0, 1"),
            std::string::npos)
      << error;
  // A filter that selects nothing warns, naming the filter, and converts nothing.
  testing::internal::CaptureStderr();
  const auto none = accel::convert_to_fp8(
      *model, accel::Fp8Options().module_filter(
                  [](const std::string&, const torch::nn::LinearImpl&) { return false; }));
  const auto warning = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(none.empty());
  EXPECT_NE(warning.find("FP8 converts no Linear of this model: Fp8Options.module_filter selects "
                         "none of its 2 Linears"),
            std::string::npos)
      << warning;
}

std::string construction_error(const accel::AcceleratorOptions& options) {
  try {
    accel::Accelerator accelerator(options);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(Fp8, TheAcceleratorNamesWhatItRefuses) {
  const auto cpu_fp8 = accel::AcceleratorOptions().cpu(true).mixed_precision("fp8");
  auto options = cpu_fp8;
  auto error = construction_error(options.grad_scaler(accel::GradScalerOptions().init_scale(1024)));
  EXPECT_NE(error.find("grad_scaler (fp16 loss scaling) was set with mixed_precision 'fp8'"),
            std::string::npos)
      << error;
  {
    accel_test::EnvGuard backend("ACCEL_FP8_BACKEND", "TE");
    error = construction_error(cpu_fp8);
    EXPECT_NE(error.find("ACCEL_FP8_BACKEND (fp8_config's backend, or --fp8_backend) is 'TE'"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("backend AO"), std::string::npos) << error;
  }
  {
    accel_test::EnvGuard backend("ACCEL_FP8_BACKEND", "ao");
    EXPECT_EQ(construction_error(cpu_fp8), "");
  }
}

TEST(Fp8, TheAcceleratorConvertsAtPrepareAndComputesInFp8InItsScopes) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true).mixed_precision("fp8"));
  EXPECT_EQ(accelerator.mixed_precision(), "fp8");
  EXPECT_EQ(accelerator.fp8_backend(), "AO");
  torch::nn::Sequential model(torch::nn::Linear(32, 64), torch::nn::Linear(64, 64),
                              torch::nn::Linear(64, 16));
  accelerator.prepare(model);
  const auto& middle = *model[1]->as<torch::nn::Linear>();
  EXPECT_TRUE(accel::is_fp8_converted(middle.weight));
  const auto x = torch::randn({8, 32});
  const auto outside = model->forward(x);
  EXPECT_EQ(outside.scalar_type(), torch::kFloat);  // no scope: fp32, as without fp8
  torch::Tensor in_forward, in_accumulate;
  {
    torch::NoGradGuard no_grad;
    in_forward = accelerator.forward(model, x);  // handed back in fp32
    EXPECT_EQ(in_forward.scalar_type(), torch::kFloat);
  }
  {
    auto step = accelerator.accumulate(model);
    in_accumulate = model->forward(x);
    EXPECT_EQ(in_accumulate.scalar_type(), torch::kBFloat16);
  }
  // The same FP8 computation in both scopes, and not bf16's.
  EXPECT_TRUE(torch::equal(in_forward, in_accumulate.to(torch::kFloat)));
  torch::Tensor bf16;
  {
    accel::AutocastGuard guard(torch::kCPU, torch::kBFloat16);
    bf16 = model->forward(x);
  }
  EXPECT_FALSE(torch::equal(bf16, in_accumulate));
  {
    // A full-precision part inside the scope: no FP8, no bf16.
    auto step = accelerator.accumulate(model);
    auto off = accelerator.autocast(accel::AutocastOptions().enabled(false));
    EXPECT_TRUE(torch::equal(model->forward(x), outside));
  }
  accel::Accelerator plain(accel::AcceleratorOptions().cpu(true).mixed_precision("bf16"));
  EXPECT_EQ(plain.fp8_backend(), "");
}

TEST(Fp8, ACheckpointedBlockRecomputesInFp8) {
  torch::manual_seed(3);
  torch::nn::Sequential block(torch::nn::Linear(32, 64), torch::nn::GELU(),
                              torch::nn::Linear(64, 32), torch::nn::Linear(32, 32));
  accel::convert_to_fp8(*block);  // the middle Linear
  const auto x = torch::randn({6, 32}, torch::requires_grad());
  auto gradients = [&](bool checkpointed) {
    block->zero_grad();
    if (x.grad().defined()) x.grad().zero_();
    torch::Tensor out;
    {
      accel::AutocastGuard fp8(torch::kCPU, torch::kBFloat16, std::nullopt, true);
      out = checkpointed
                ? accel::checkpoint([&](const torch::Tensor& h) { return block->forward(h); }, x)
                : block->forward(x);
    }
    // Backward outside the scope: the recompute must open it again.
    out.to(torch::kFloat).pow(2).sum().backward();
    std::vector<torch::Tensor> grads{x.grad().clone()};
    for (const auto& p : block->parameters()) grads.push_back(p.grad().clone());
    return grads;
  };
  const auto plain = gradients(false);
  const auto checkpointed = gradients(true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], checkpointed[i]));
}

// ---- Training: a small transformer, fp8 against bf16 ----------------------------------------

/// A causal transformer block: attention (q, k, v, o) and an MLP, pre-norm, residual.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width)
      : heads(4),
        norm1(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        q(register_module("q", torch::nn::Linear(width, width))),
        k(register_module("k", torch::nn::Linear(width, width))),
        v(register_module("v", torch::nn::Linear(width, width))),
        o(register_module("o", torch::nn::Linear(width, width))),
        norm2(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        up(register_module("up", torch::nn::Linear(width, 4 * width))),
        down(register_module("down", torch::nn::Linear(4 * width, width))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const auto b = x.size(0), t = x.size(1), c = x.size(2);
    auto h = norm1(x);
    auto split = [&](const torch::Tensor& y) {
      return y.view({b, t, heads, c / heads}).transpose(1, 2);
    };
    auto attention = torch::scaled_dot_product_attention(split(q(h)), split(k(h)), split(v(h)), {},
                                                         0.0, /*is_causal=*/true);
    auto y = x + o(attention.transpose(1, 2).reshape({b, t, c}));
    return y + down(torch::gelu(up(norm2(y))));
  }
  int64_t heads;
  torch::nn::LayerNorm norm1;
  torch::nn::Linear q, k, v, o;
  torch::nn::LayerNorm norm2;
  torch::nn::Linear up, down;
};
TORCH_MODULE(Block);

struct TinyGptImpl : torch::nn::Module {
  TinyGptImpl(int64_t vocab, int64_t width)
      : embed(register_module("embed", torch::nn::Embedding(vocab, width))),
        position(register_parameter("position", torch::randn({32, width}) * 0.02)),
        stem(register_module("stem", torch::nn::Linear(width, width))),
        block1(register_module("block1", Block(width))),
        block2(register_module("block2", Block(width))),
        head(register_module("head", torch::nn::Linear(width, vocab))) {}
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto x = stem(embed(tokens) + position.slice(0, 0, tokens.size(1)));
    return head(block2(block1(x)));
  }
  torch::nn::Embedding embed;
  torch::Tensor position;
  torch::nn::Linear stem;
  Block block1, block2;
  torch::nn::Linear head;
};
TORCH_MODULE(TinyGpt);

/// Sequences where each token is the previous one plus 1 (mod vocab) with probability 0.7 and
/// random otherwise: the loss can fall to about the noise's entropy, not to zero.
std::pair<torch::Tensor, torch::Tensor> sequences(int64_t batch, int64_t length, int64_t vocab) {
  auto tokens = torch::empty({batch, length + 1}, torch::kLong);
  tokens.select(1, 0).copy_(torch::randint(vocab, {batch}));
  for (int64_t i = 1; i <= length; ++i) {
    const auto follow = torch::rand({batch}).lt(0.7);
    const auto next =
        torch::where(follow, (tokens.select(1, i - 1) + 1) % vocab, torch::randint(vocab, {batch}));
    tokens.select(1, i).copy_(next);
  }
  return {tokens.slice(1, 0, length), tokens.slice(1, 1, length + 1)};
}

/// The mean loss of the last 20 of 200 AdamW steps; the Linears `fp8` converted listed in
/// `converted`.
double train_tiny_gpt(const std::string& mixed_precision, std::vector<std::string>* converted) {
  constexpr int64_t kVocab = 64, kWidth = 64, kSteps = 200;
  torch::manual_seed(0);
  TinyGpt model(kVocab, kWidth);
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).mixed_precision(mixed_precision));
  accelerator.prepare(model);
  if (converted != nullptr) {
    for (const auto& item : model->named_modules()) {
      if (auto* linear = item.value()->as<torch::nn::Linear>()) {
        if (accel::is_fp8_converted(linear->weight)) converted->push_back(item.key());
      }
    }
  }
  auto optimizer = accelerator.prepare(
      torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(3e-3)));
  torch::manual_seed(1);  // the same data in every run
  double tail = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const auto [inputs, targets] = sequences(16, 32, kVocab);
    auto scope = accelerator.accumulate(model);
    const auto logits = model->forward(inputs);
    auto loss = torch::cross_entropy_loss(logits.reshape({-1, kVocab}).to(torch::kFloat),
                                          targets.reshape({-1}));
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    if (step >= kSteps - 20) tail += loss.item<double>() / 20;
  }
  return tail;
}

TEST(Fp8, ASmallTransformerTrainsWithinTwoPercentOfBf16) {
  std::vector<std::string> converted;
  const double fp8 = train_tiny_gpt("fp8", &converted);
  const double bf16 = train_tiny_gpt("bf16", nullptr);
  std::cout << "tiny transformer, mean loss of steps 181-200: bf16 " << bf16 << ", fp8 " << fp8
            << " (" << converted.size() << " Linears in FP8)\n";
  // Every Linear but the first (stem) and the last (head).
  EXPECT_EQ(converted,
            (std::vector<std::string>{"block1.q", "block1.k", "block1.v", "block1.o", "block1.up",
                                      "block1.down", "block2.q", "block2.k", "block2.v", "block2.o",
                                      "block2.up", "block2.down"}));
  // It learned (from log(64) = 4.16 towards the noise's floor, about 1.6)...
  EXPECT_LT(bf16, 2.5);
  // ...and fp8 ends within 2% of bf16, without being bf16 itself.
  EXPECT_LE(std::abs(fp8 - bf16), 0.02 * bf16) << "bf16 " << bf16 << " fp8 " << fp8;
  EXPECT_NE(fp8, bf16);
}

}  // namespace
