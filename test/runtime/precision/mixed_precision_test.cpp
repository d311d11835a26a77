// Mixed precision on one process: bf16 autocast scopes, and the fp16 loss scaler's semantics
// (skip on inf/nan, back off, grow) driven through a prepared optimizer and scheduler. fp16
// compute needs CUDA; the scaler's logic runs on fp32 CPU gradients with injected infs here.

#include <accel/accel.h>
#include "optim/training_loop.h"

#include "support/datasets.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace {

using accel_test::RegressionDataset;

std::string error_of(const accel::AcceleratorOptions& options) {
  try {
    accel::Accelerator accelerator(options);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(MixedPrecision, UnavailableCombinationsFailAtConstruction) {
  // This suite runs on the CPU (as CI does): fp16 needs CUDA; fp8 runs here (fp8_test.cpp).
  const auto fp16 = error_of(accel::AcceleratorOptions().cpu(true).mixed_precision("fp16"));
  EXPECT_NE(fp16.find("mixed_precision 'fp16' needs a CUDA device"), std::string::npos) << fp16;
  EXPECT_NE(fp16.find("available here: no, bf16"), std::string::npos) << fp16;
  EXPECT_EQ(error_of(accel::AcceleratorOptions().cpu(true).mixed_precision("fp8")), "");
  EXPECT_EQ(error_of(accel::AcceleratorOptions().cpu(true).mixed_precision("bf16")), "");
}

TEST(MixedPrecision, Bf16AutocastInsideScopesOnly) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true).mixed_precision("bf16"));
  torch::nn::Linear model(4, 3);
  accelerator.prepare(model);
  const auto x = torch::randn({2, 4});
  EXPECT_EQ(model->forward(x).scalar_type(), torch::kFloat32);
  {
    auto step = accelerator.accumulate(model);
    EXPECT_EQ(model->forward(x).scalar_type(), torch::kBFloat16);
    EXPECT_EQ(torch::matmul(x, x.t()).scalar_type(), torch::kBFloat16);
    // Precision-sensitive ops stay fp32 under autocast's policy.
    EXPECT_EQ(torch::mse_loss(model->forward(x), torch::zeros({2, 3})).scalar_type(),
              torch::kFloat32);
  }
  EXPECT_EQ(torch::matmul(x, x.t()).scalar_type(), torch::kFloat32);
  {
    auto outer = accelerator.autocast();
    {
      auto inner = accelerator.autocast();
      EXPECT_EQ(torch::matmul(x, x.t()).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(torch::matmul(x, x.t()).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(model->forward(x).scalar_type(), torch::kFloat32);
}

TEST(MixedPrecision, AutocastOptionsTurnAutocastAndItsCacheOff) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true).mixed_precision("bf16"));
  torch::nn::Linear model(4, 3);
  accelerator.prepare(model);
  const auto x = torch::randn({2, 4});
  ASSERT_TRUE(at::autocast::is_autocast_cache_enabled());
  {
    // One full-precision part inside a mixed-precision program.
    auto off = accelerator.autocast(accel::AutocastOptions().enabled(false));
    EXPECT_FALSE(off.active());
    EXPECT_EQ(model->forward(x).scalar_type(), torch::kFloat32);
  }
  {
    // Inside an accumulate() scope too: its part runs in fp32, and the scope's bf16 returns.
    auto step = accelerator.accumulate(model);
    EXPECT_EQ(model->forward(x).scalar_type(), torch::kBFloat16);
    {
      auto off = accelerator.autocast(accel::AutocastOptions().enabled(false));
      EXPECT_EQ(model->forward(x).scalar_type(), torch::kFloat32);
      EXPECT_EQ(torch::matmul(x, x.t()).scalar_type(), torch::kFloat32);
    }
    EXPECT_EQ(model->forward(x).scalar_type(), torch::kBFloat16);
  }
  {
    auto uncached = accelerator.autocast(accel::AutocastOptions().cache_enabled(false));
    EXPECT_EQ(model->forward(x).scalar_type(), torch::kBFloat16);
    EXPECT_FALSE(at::autocast::is_autocast_cache_enabled());
  }
  EXPECT_TRUE(at::autocast::is_autocast_cache_enabled());  // as it was
  // The options given at construction hold for every scope: accumulate() and forward() too.
  accel::Accelerator plain(accel::AcceleratorOptions().cpu(true).mixed_precision("bf16").autocast(
      accel::AutocastOptions().enabled(false)));
  torch::nn::Linear other(4, 3);
  plain.prepare(other);
  {
    auto step = plain.accumulate(other);
    EXPECT_EQ(other->forward(x).scalar_type(), torch::kFloat32);
  }
  EXPECT_EQ(plain.forward(other, x).scalar_type(), torch::kFloat32);
}

/// Returns its linear layer's output, the argmax indices and a deliberately bf16 copy.
struct ThreeOutputs : torch::nn::Module {
  ThreeOutputs() { fc = register_module("fc", torch::nn::Linear(4, 3)); }
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) {
    auto y = fc->forward(x);
    return {y, y.argmax(1), y.to(torch::kBFloat16)};
  }
  torch::nn::Linear fc{nullptr};
};

TEST(MixedPrecision, ForwardComputesInBf16AndHandsBackFp32) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true).mixed_precision("bf16"));
  torch::nn::Linear model(4, 3);
  accelerator.prepare(model);
  const auto x = torch::randn({8, 4});
  const auto out = accelerator.forward(model, x);
  EXPECT_EQ(out.scalar_type(), torch::kFloat32);
  torch::Tensor in_scope;
  {
    auto scope = accelerator.autocast();
    in_scope = model->forward(x);
  }
  ASSERT_EQ(in_scope.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(out, in_scope.to(torch::kFloat32)));
  // Computed in bf16: not the fp32 forward's values, though close to them.
  const auto full = model->forward(x);
  EXPECT_FALSE(torch::equal(out, full));
  EXPECT_TRUE(torch::allclose(out, full, /*rtol=*/0.02, /*atol=*/0.02));
  // Autocast is off again afterwards, and gradients flow through the conversion in fp32.
  EXPECT_EQ(torch::matmul(x, x.t()).scalar_type(), torch::kFloat32);
  accelerator.backward(torch::mse_loss(accelerator.forward(model, x), torch::zeros({8, 3})));
  ASSERT_TRUE(model->weight.grad().defined());
  EXPECT_EQ(model->weight.grad().scalar_type(), torch::kFloat32);
  EXPECT_GT(model->weight.grad().abs().sum().item<double>(), 0.0);

  // A module by reference and by shared pointer; tuple outputs are converted element by element.
  auto three = std::make_shared<ThreeOutputs>();
  accelerator.prepare(three);
  auto by_pointer = accelerator.forward(three, x);
  auto by_reference = accelerator.forward(*three, x);
  EXPECT_EQ(std::get<0>(by_pointer).scalar_type(), torch::kFloat32);
  EXPECT_EQ(std::get<1>(by_pointer).scalar_type(), torch::kLong);
  EXPECT_EQ(std::get<2>(by_pointer).scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(std::get<0>(by_pointer), std::get<0>(by_reference)));
}

TEST(MixedPrecision, ForwardWithoutMixedPrecisionIsThePlainCall) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true).mixed_precision("no"));
  ThreeOutputs model;
  accelerator.prepare(model);
  const auto x = torch::randn({8, 4});
  const auto out = accelerator.forward(model, x);
  const auto plain = model.forward(x);
  EXPECT_TRUE(torch::equal(std::get<0>(out), std::get<0>(plain)));
  // Nothing converted: the module's own bf16 output stays bf16.
  EXPECT_EQ(std::get<2>(out).scalar_type(), torch::kBFloat16);
}

TEST(MixedPrecision, ConvertToFp32LooksThroughContainers) {
  const auto half = torch::ones({2}, torch::kHalf);
  const auto bf16 = torch::ones({2}, torch::kBFloat16);
  const auto index = torch::arange(3);
  const auto f64 = torch::ones({1}, torch::kFloat64);
  EXPECT_EQ(accel::convert_to_fp32(half).scalar_type(), torch::kFloat32);
  EXPECT_EQ(accel::convert_to_fp32(f64).scalar_type(), torch::kFloat64);
  EXPECT_FALSE(accel::convert_to_fp32(torch::Tensor()).defined());

  const auto list = accel::convert_to_fp32(std::vector<torch::Tensor>{half, index});
  EXPECT_EQ(list[0].scalar_type(), torch::kFloat32);
  EXPECT_TRUE(list[1].is_same(index));
  const auto named = accel::convert_to_fp32(std::map<std::string, torch::Tensor>{{"a", bf16}});
  EXPECT_EQ(named.at("a").scalar_type(), torch::kFloat32);
  const auto hashed = accel::convert_to_fp32(std::unordered_map<int, torch::Tensor>{{1, half}});
  EXPECT_EQ(hashed.at(1).scalar_type(), torch::kFloat32);
  const auto nested = accel::convert_to_fp32(
      std::make_tuple(std::vector<std::pair<std::string, torch::Tensor>>{{"b", bf16}}, 7, index));
  EXPECT_EQ(std::get<0>(nested)[0].second.scalar_type(), torch::kFloat32);
  EXPECT_EQ(std::get<1>(nested), 7);
  EXPECT_TRUE(std::get<2>(nested).is_same(index));
}

TEST(MixedPrecision, NoMixedPrecisionLeavesAutocastOff) {
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true).mixed_precision("no"));
  EXPECT_EQ(accelerator.scaler(), nullptr);
  auto guard = accelerator.autocast();
  EXPECT_FALSE(guard.active());
  const auto x = torch::randn({2, 2});
  EXPECT_EQ(torch::matmul(x, x).scalar_type(), torch::kFloat32);
}

// Fits y = 2x + 3 with a Linear layer; returns the final full-data loss in fp32.
double train_regression(const std::string& mixed_precision) {
  torch::manual_seed(0);
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).mixed_precision(mixed_precision).seed(7));
  torch::nn::Linear model(1, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto loader = accelerator.prepare_data_loader(
      RegressionDataset(96).map(torch::data::transforms::Stack<>()), 16);
  for (int epoch = 0; epoch < 20; ++epoch) {
    for (auto& batch : *loader) {
      auto step = accelerator.accumulate(model);
      auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
      accelerator.backward(loss);
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  torch::NoGradGuard no_grad;
  RegressionDataset data(96);
  double total = 0;
  for (size_t i = 0; i < 96; ++i) {
    auto e = data.get(i);
    total +=
        torch::mse_loss(model->forward(e.data.view({1, 1})), e.target.view({1, 1})).item<double>();
  }
  return total / 96;
}

TEST(MixedPrecision, Bf16TrainingEndsNearFp32) {
  const double fp32 = train_regression("no");
  const double bf16 = train_regression("bf16");
  // The noise floor is 0.01 (noise 0.1); bf16 keeps ~3 significant digits of the weights'
  // products, so the fitted loss may sit a little above fp32's but within 0.005 of it.
  EXPECT_LT(fp32, 0.02);
  EXPECT_NEAR(bf16, fp32, 0.005) << "fp32 " << fp32 << " bf16 " << bf16;
  std::cout << "regression loss: fp32 " << fp32 << ", bf16 " << bf16 << "\n";
}

// ---- The fp16 loss scaler -----------------------------------------------------------------------

struct ScaledTraining {
  explicit ScaledTraining(accel::GradScalerOptions options) {
    state->optimizers.set_scaler(std::make_shared<accel::GradScaler>(options));
  }
  std::shared_ptr<accel::detail::TrainingLoop> state =
      std::make_shared<accel::detail::TrainingLoop>();
  accel_test::RegressionModel model;
  accel::AcceleratedOptimizer<torch::optim::SGD> optimizer{
      torch::optim::SGD(model->parameters(), 0.1), state};
  accel::AcceleratedScheduler<torch::optim::StepLR> scheduler{
      torch::optim::StepLR(optimizer, 1, 0.5), state, true, 1};

  /// One step; `poison` puts inf or nan into a's gradient after backward.
  void step(double poison = 0) {
    auto loss = torch::mse_loss(model->forward(torch::ones({4, 1})), torch::full({4, 1}, 5.0));
    state->optimizers.scaler()->scale(loss).backward();
    if (poison != 0) model->a.mutable_grad()[0] = poison;
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
  }
  double a() const { return model->a.item<double>(); }
  double lr() { return optimizer.param_groups()[0].options().get_lr(); }
};

TEST(GradScaler, ScalesTheLossAndUnscalesTheGradients) {
  ScaledTraining t(accel::GradScalerOptions().init_scale(1024));
  auto loss = torch::mse_loss(t.model->forward(torch::ones({4, 1})), torch::full({4, 1}, 5.0));
  EXPECT_DOUBLE_EQ(t.state->optimizers.scaler()->scale(loss).item<double>(),
                   loss.item<double>() * 1024);
  t.state->optimizers.scaler()->scale(loss).backward();
  EXPECT_NEAR(t.model->a.grad().item<double>(), -10.0 * 1024, 1e-3);
  EXPECT_FALSE(t.state->optimizers.scaler()->unscaled(t.optimizer));
  t.state->optimizers.scaler()->unscale_(t.optimizer);
  EXPECT_TRUE(
      t.state->optimizers.scaler()->unscaled(t.optimizer));  // Accelerator::unscale_gradients asks
  EXPECT_NEAR(t.model->a.grad().item<double>(), -10.0, 1e-6);
  EXPECT_THROW(t.state->optimizers.scaler()->unscale_(t.optimizer), c10::Error);  // once per step
  t.optimizer.step();  // does not unscale again
  EXPECT_NEAR(t.a(), 1.0, 1e-6);
  EXPECT_FALSE(t.state->sync.step_was_skipped());
}

TEST(GradScaler, InfOrNanSkipsTheStepHalvesTheScaleAndHoldsTheScheduler) {
  ScaledTraining t{accel::GradScalerOptions()};
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 65536.0);

  t.step(std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(t.state->sync.step_was_skipped());
  EXPECT_EQ(t.a(), 0.0);
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 32768.0);
  EXPECT_DOUBLE_EQ(t.lr(), 0.1);  // the scheduler did not advance

  t.step(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(t.state->sync.step_was_skipped());
  EXPECT_EQ(t.a(), 0.0);
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 16384.0);
  EXPECT_DOUBLE_EQ(t.lr(), 0.1);

  t.step();
  EXPECT_FALSE(t.state->sync.step_was_skipped());
  EXPECT_NEAR(t.a(), 1.0, 1e-6);  // lr 0.1 * -grad 10, unscaled
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 16384.0);
  // LibTorch's StepLR changes the rate from its second step on: had the two skipped steps
  // advanced the scheduler, this first real step would already have halved it.
  EXPECT_DOUBLE_EQ(t.lr(), 0.1);
  EXPECT_EQ(t.state->optimizers.scaler()->growth_tracker(), 1);
  t.step();
  EXPECT_DOUBLE_EQ(t.lr(), 0.05);
}

TEST(GradScaler, GrowsAfterTheIntervalOfCleanSteps) {
  ScaledTraining t(accel::GradScalerOptions().init_scale(8).growth_interval(3));
  t.step();
  t.step();
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 8.0);
  t.step();
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 16.0);
  EXPECT_EQ(t.state->optimizers.scaler()->growth_tracker(), 0);
  t.step();
  t.step(std::numeric_limits<double>::infinity());  // resets the count
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 8.0);
  t.step();
  t.step();
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 8.0);
  t.step();
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 16.0);
}

TEST(GradScaler, AccumulationMicroStepsDoNotTouchTheScaler) {
  ScaledTraining t(accel::GradScalerOptions().init_scale(4).growth_interval(1));
  t.state->sync.set_sync_gradients(false);
  t.step();
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 4.0);
  t.state->sync.set_sync_gradients(true);
  t.step();
  EXPECT_EQ(t.state->optimizers.scaler()->get_scale(), 8.0);
}

TEST(GradScaler, DisabledScalerIsTheIdentity) {
  accel::GradScaler scaler(accel::GradScalerOptions().enabled(false));
  auto x = torch::tensor(3.0);
  EXPECT_EQ(scaler.scale(x).item<double>(), 3.0);
  EXPECT_EQ(scaler.get_scale(), 1.0);
  bool ran = false;
  torch::optim::SGD sgd(std::vector<torch::Tensor>{torch::zeros({1}, torch::requires_grad())}, 0.1);
  EXPECT_TRUE(scaler.step(sgd, [&] { ran = true; }));
  EXPECT_TRUE(ran);
}

TEST(GradScaler, StateRoundTripsThroughAnArchive) {
  accel::GradScaler scaler(accel::GradScalerOptions().init_scale(8).growth_interval(5));
  torch::optim::SGD sgd(std::vector<torch::Tensor>{torch::ones({1}, torch::requires_grad())}, 0.1);
  sgd.param_groups()[0].params()[0].mutable_grad() = torch::ones({1});
  scaler.step(sgd, [] {});
  scaler.update();
  torch::serialize::OutputArchive out;
  scaler.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  accel::GradScaler restored;
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  restored.load(in);
  EXPECT_EQ(restored.get_scale(), 8.0);
  EXPECT_EQ(restored.growth_tracker(), 1);
  EXPECT_EQ(restored.options().growth_interval(), 5);
}

TEST(GradScaler, RejectsSettingsThatCannotWork) {
  EXPECT_THROW(accel::GradScaler(accel::GradScalerOptions().backoff_factor(1.5)), c10::Error);
  EXPECT_THROW(accel::GradScaler(accel::GradScalerOptions().growth_interval(0)), c10::Error);
}

}  // namespace
