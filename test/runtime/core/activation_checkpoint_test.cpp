// accel::checkpoint and CheckpointWrapper on one process: gradients bit for bit those of the
// plain call (dropout, autocast, nesting, inputs that need no gradient, accumulation), the
// activation memory it saves (counted by the allocator), and its errors.

#include <accel/accel.h>

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "util/counting_allocator.h"

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

/// A block with dropout: what recomputation must draw again exactly.
struct DropBlockImpl : torch::nn::Module {
  explicit DropBlockImpl(int64_t width) {
    up = register_module("up", torch::nn::Linear(width, 2 * width));
    down = register_module("down", torch::nn::Linear(2 * width, width));
    dropout = register_module("dropout", torch::nn::Dropout(0.3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + down(dropout(torch::gelu(up(x)))); }
  torch::nn::Linear up{nullptr}, down{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(DropBlock);

torch::nn::Sequential blocks(int64_t count, int64_t width) {
  torch::manual_seed(11);
  torch::nn::Sequential model;
  for (int64_t i = 0; i < count; ++i) model->push_back(DropBlock(width));
  return model;
}

std::vector<torch::Tensor> gradients(const torch::nn::Sequential& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
  return out;
}

void expect_bitwise_equal(const std::vector<torch::Tensor>& a,
                          const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined() && b[i].defined()) << "parameter " << i << " has no gradient";
    EXPECT_TRUE(torch::equal(a[i], b[i]))
        << "parameter " << i << " differs by " << (a[i] - b[i]).abs().max().item<double>();
  }
}

/// One forward and backward of `model` on x: each block called directly, or checkpointed (and
/// with `nested`, each block's two halves checkpointed again inside it).
std::vector<torch::Tensor> run(torch::nn::Sequential& model, const torch::Tensor& x,
                               bool checkpointed, bool nested = false) {
  torch::manual_seed(5);
  auto h = x;
  for (const auto& module : *model) {
    auto block = module.ptr<DropBlockImpl>();
    if (!checkpointed) {
      h = block->forward(h);
      continue;
    }
    h = accel::checkpoint(
        [block, nested](const torch::Tensor& in) {
          if (!nested) return block->forward(in);
          auto inner = accel::checkpoint(
              [block](const torch::Tensor& y) { return torch::gelu(block->up(y)); }, in);
          return in + block->down(block->dropout(inner));
        },
        h);
  }
  model->zero_grad();
  h.pow(2).mean().backward();
  return gradients(model);
}

TEST(ActivationCheckpoint, GradientsAreBitwiseThoseOfThePlainCallWithDropout) {
  auto model = blocks(4, 16);
  const auto x = torch::randn({8, 16});
  const auto plain = run(model, x, false);
  expect_bitwise_equal(run(model, x, true), plain);
  // Checkpoints inside checkpoints give the same again.
  expect_bitwise_equal(run(model, x, true, /*nested=*/true), plain);
  // The generator goes on as after the plain forward: recomputation draws from saved states.
  torch::manual_seed(5);
  auto h = x;
  for (const auto& module : *model) h = module.ptr<DropBlockImpl>()->forward(h);
  const auto after_plain = torch::rand({4});
  run(model, x, true);
  torch::manual_seed(5);
  h = x;
  for (const auto& module : *model) {
    auto block = module.ptr<DropBlockImpl>();
    h = accel::checkpoint([block](const torch::Tensor& in) { return block->forward(in); }, h);
  }
  h.pow(2).mean().backward();
  EXPECT_TRUE(torch::equal(torch::rand({4}), after_plain));
}

TEST(ActivationCheckpoint, InputsThatNeedNoGradientStillGiveTheParametersTheirs) {
  // The first block's input is data: PyTorch's reentrant checkpoint would drop its parameters'
  // gradients. x itself still gets none.
  auto model = blocks(1, 8);
  const auto x = torch::randn({4, 8});
  const auto plain = run(model, x, false);
  const auto checkpointed = run(model, x, true);
  expect_bitwise_equal(checkpointed, plain);
  EXPECT_FALSE(x.grad().defined());
  // An input that needs one gets it, equal to the plain call's.
  auto a = torch::randn({4, 8}, torch::requires_grad());
  auto b = a.detach().clone().requires_grad_(true);
  auto block = model[0]->as<DropBlockImpl>();
  torch::manual_seed(1);
  block->forward(a).sum().backward();
  torch::manual_seed(1);
  accel::checkpoint([block](const torch::Tensor& in) { return block->forward(in); }, b)
      .sum()
      .backward();
  EXPECT_TRUE(torch::equal(a.grad(), b.grad()));
}

TEST(ActivationCheckpoint, UnderBf16AutocastAsItRan) {
  auto model = blocks(3, 16);
  const auto x = torch::randn({8, 16});
  // Forward under bf16 autocast, backward after the guard is gone (as a training step does): the
  // recomputation must take the autocast the forward ran under.
  auto gradients_of = [&](bool checkpointed) {
    torch::manual_seed(5);
    auto h = x;
    {
      accel::AutocastGuard bf16(torch::kCPU, torch::kBFloat16);
      for (const auto& module : *model) {
        auto block = module.ptr<DropBlockImpl>();
        h = checkpointed ? accel::checkpoint(
                               [block](const torch::Tensor& in) { return block->forward(in); }, h)
                         : block->forward(h);
      }
    }
    model->zero_grad();
    h.pow(2).mean().backward();
    return gradients(model);
  };
  const auto plain = gradients_of(false);
  expect_bitwise_equal(gradients_of(true), plain);
  // Autocast mattered: the same step in fp32 gives other gradients, which a recomputation in
  // fp32 would have given.
  torch::manual_seed(5);
  model->zero_grad();
  model->forward(x).pow(2).mean().backward();
  EXPECT_FALSE(torch::equal(gradients(model)[0], plain[0]));
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
}

TEST(ActivationCheckpoint, SeveralInputsAndOutputs) {
  auto w = torch::randn({6, 6}, torch::requires_grad());
  auto a = torch::randn({3, 6}, torch::requires_grad());
  auto b = torch::randn({3, 6}, torch::requires_grad());
  auto block = [&w](const torch::Tensor& p, const torch::Tensor& q) {
    return std::vector<torch::Tensor>{torch::tanh(p.matmul(w)), q * p};
  };
  auto direct = block(a, b);
  (direct[0].sum() + direct[1].pow(2).sum()).backward();
  const auto wa = w.grad().clone(), aa = a.grad().clone(), ba = b.grad().clone();
  w.mutable_grad().reset();
  a.mutable_grad().reset();
  b.mutable_grad().reset();
  auto outputs = accel::checkpoint(block, a, b);
  ASSERT_EQ(outputs.size(), 2u);
  (outputs[0].sum() + outputs[1].pow(2).sum()).backward();
  EXPECT_TRUE(torch::equal(w.grad(), wa));
  EXPECT_TRUE(torch::equal(a.grad(), aa));
  EXPECT_TRUE(torch::equal(b.grad(), ba));
}

TEST(ActivationCheckpoint, WithoutGradientsItIsAPlainCall) {
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 2});
  auto y = accel::checkpoint([](const torch::Tensor& in) { return in * 2; }, x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(torch::equal(y, x * 2));
}

TEST(ActivationCheckpoint, ABlockWithNothingToDifferentiateIsAnError) {
  auto x = torch::randn({4});
  try {
    accel::checkpoint([](const torch::Tensor& in) { return in.argmax(); }, x);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("returns no tensor that can take a gradient"),
              std::string::npos)
        << e.what();
  }
}

/// The most bytes `model` holds for backward after a forward of x, counted by the allocator.
int64_t activation_bytes(torch::nn::Sequential& model, const torch::Tensor& x, bool checkpointed) {
  accel::util::CountingCpuAllocator counter;
  const int64_t before = counter.live_bytes();
  torch::Tensor h = x;
  for (const auto& module : *model) {
    auto block = module.ptr<DropBlockImpl>();
    h = checkpointed
            ? accel::checkpoint([block](const torch::Tensor& in) { return block->forward(in); }, h)
            : block->forward(h);
  }
  const int64_t kept = counter.live_bytes() - before;
  h.sum().backward();
  return kept;
}

TEST(ActivationCheckpoint, A32BlockModelKeepsOnlyEachBlocksInput) {
  auto model = blocks(32, 256);
  const auto x = torch::randn({64, 256});
  const int64_t plain = activation_bytes(model, x, false);
  const int64_t checkpointed = activation_bytes(model, x, true);
  // Each block keeps its input (64 x 256 floats, 64 KiB) and the generator state it started
  // from (about 3 KiB), and the last block's output is alive; the plain call keeps about 8
  // such tensors per block (two linears' inputs, gelu's, dropout's mask, ...).
  const int64_t one_input = x.nbytes();
  EXPECT_LE(checkpointed, 33 * one_input + 32 * 4096 + (64 << 10));
  EXPECT_LE(checkpointed * 4, plain);
  std::printf(
      "32 blocks of width 256, batch 64: activations kept for backward %.2f MiB plain, "
      "%.2f MiB checkpointed (%.2f)\n",
      plain / 1048576.0, checkpointed / 1048576.0,
      static_cast<double>(checkpointed) / static_cast<double>(plain));
}

TEST(ActivationCheckpoint, WrappingASequentialsBlocksKeepsNamesAndGradients) {
  auto model = blocks(3, 8);
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) names.push_back(item.key());
  const auto x = torch::randn({4, 8});
  auto forward_backward = [&] {
    torch::manual_seed(5);
    model->zero_grad();
    model->forward(x).pow(2).mean().backward();
    return gradients(model);
  };
  const auto plain = forward_backward();
  EXPECT_EQ(accel::apply_activation_checkpointing(model, {"DropBlock"}), 3);
  EXPECT_EQ(accel::apply_activation_checkpointing(model, {"DropBlock"}), 0);  // once only
  std::vector<std::string> after;
  for (const auto& item : model->named_parameters()) after.push_back(item.key());
  EXPECT_EQ(after, names);
  expect_bitwise_equal(forward_backward(), plain);
  // And the user's own wrapper, as PyTorch's checkpoint_wrapper.
  torch::nn::Sequential wrapped;
  wrapped->push_back(accel::CheckpointWrapper(DropBlock(8)));
  EXPECT_EQ(wrapped->named_parameters().size(), 4u);
  EXPECT_TRUE(wrapped->forward(x).requires_grad());
}

struct ListModelImpl : torch::nn::Module {
  ListModelImpl() {
    layers = register_module("layers", torch::nn::ModuleList(DropBlock(4), DropBlock(4)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (const auto& layer : *layers) x = layer->as<DropBlockImpl>()->forward(x);
    return x;
  }
  torch::nn::ModuleList layers{nullptr};
};
TORCH_MODULE(ListModel);

TEST(ActivationCheckpoint, UnitsItCannotWrapAreNamedNotSkipped) {
  ListModel model;
  try {
    accel::apply_activation_checkpointing(model, {"DropBlock"});
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'layers.0'"), std::string::npos) << message;
    EXPECT_NE(message.find("accel::checkpoint"), std::string::npos) << message;
  }
}

TEST(ActivationCheckpoint, TheOptionWrapsAtPrepareAndAccumulationMatches) {
  // Two micro-steps of accumulation and a step, with and without the option: the same weights.
  auto train = [](bool checkpointing) {
    accel::Accelerator accelerator(accel::AcceleratorOptions()
                                       .cpu(true)
                                       .gradient_accumulation_steps(2)
                                       .fsdp_transformer_layer_cls_to_wrap({"DropBlock"})
                                       .fsdp_activation_checkpointing(checkpointing));
    auto model = blocks(3, 8);
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
    torch::manual_seed(9);
    for (int step = 0; step < 4; ++step) {
      auto scope = accelerator.accumulate(model);
      auto x = torch::randn({4, 8});
      accelerator.backward(model->forward(x).pow(2).mean());
      accelerator.clip_grad_norm_(model->parameters(), 0.5);
      optimizer.step();
      optimizer.zero_grad();
    }
    std::vector<torch::Tensor> weights;
    for (const auto& p : model->parameters()) weights.push_back(p.detach().clone());
    return weights;
  };
  expect_bitwise_equal(train(true), train(false));
}

TEST(ActivationCheckpoint, EveryPolicyGivesThePlainGradientsWithAccumulationAndClipping) {
  // Every mode under a real loop (two micro-steps, clipping at each): the same weights as the
  // plain run, bit for bit.
  auto train = [](std::optional<accel::CheckpointPolicy> policy) {
    accel::Accelerator accelerator(
        accel::AcceleratorOptions()
            .cpu(true)
            .gradient_accumulation_steps(2)
            .fsdp_transformer_layer_cls_to_wrap({"DropBlock"})
            .fsdp_activation_checkpointing(policy.has_value())
            .activation_checkpointing_policy(policy.value_or(accel::CheckpointPolicy())));
    auto model = blocks(5, 8);
    accelerator.prepare(model);
    int64_t wrapped = 0;
    for (const auto& module : *model) {
      wrapped += module.ptr()->as<accel::CheckpointWrapper>() != nullptr ? 1 : 0;
    }
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
    torch::manual_seed(9);
    for (int step = 0; step < 4; ++step) {
      auto scope = accelerator.accumulate(model);
      accelerator.backward(model->forward(torch::randn({4, 8})).pow(2).mean());
      accelerator.clip_grad_norm_(model->parameters(), 0.5);
      optimizer.step();
      optimizer.zero_grad();
    }
    std::vector<torch::Tensor> weights;
    for (const auto& p : model->parameters()) weights.push_back(p.detach().clone());
    return std::make_pair(weights, wrapped);
  };
  const auto plain = train(std::nullopt);
  EXPECT_EQ(plain.second, 0);
  const auto full = train(accel::CheckpointPolicy());
  EXPECT_EQ(full.second, 5);
  expect_bitwise_equal(full.first, plain.first);
  const auto every2 = train(accel::CheckpointPolicy().mode("selective").every(2));
  EXPECT_EQ(every2.second, 2);  // the 2nd and the 4th
  expect_bitwise_equal(every2.first, plain.first);
  const auto offloaded =
      train(accel::CheckpointPolicy().block(accel::CheckpointOptions().offload(true)));
  EXPECT_EQ(offloaded.second, 5);
  expect_bitwise_equal(offloaded.first, plain.first);
  const auto op_level = train(accel::CheckpointPolicy().mode(accel::CheckpointMode::Op));
  EXPECT_EQ(op_level.second, 5);
  expect_bitwise_equal(op_level.first, plain.first);
}

/// An attention-like block: batched products (bmm through matmul), Linears on 3-D inputs
/// (matmul + bias), a softmax and dropout between them.
struct MixerImpl : torch::nn::Module {
  explicit MixerImpl(int64_t width)
      : q(register_module("q", torch::nn::Linear(width, width))),
        k(register_module("k", torch::nn::Linear(width, width))),
        out(register_module("out", torch::nn::Linear(width, width))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto scores = torch::softmax(q(x).matmul(k(x).transpose(1, 2)), -1);
    return x + out(torch::dropout(scores, 0.2, is_training()).matmul(x));
  }
  torch::nn::Linear q, k, out;
};
TORCH_MODULE(Mixer);

TEST(ActivationCheckpoint, SavedMatmulsGiveThePlainGradientsUnderAutocastAndBatchedProducts) {
  torch::manual_seed(4);
  Mixer mixer(16);
  auto held = blocks(1, 16);
  auto block = held[0]->as<DropBlock>();
  const auto x = torch::randn({3, 5, 16}, torch::requires_grad());
  const auto x2 = torch::randn({6, 16}, torch::requires_grad());
  const accel::CheckpointOptions saving = accel::CheckpointOptions().save_matmuls(true);
  for (const bool bf16 : {false, true}) {
    auto run = [&](bool checkpointed) {
      mixer->zero_grad();
      block->zero_grad();
      for (const auto* input : {&x, &x2}) {
        if (input->grad().defined()) input->mutable_grad().zero_();
      }
      torch::manual_seed(5);
      torch::Tensor loss;
      {
        accel::AutocastGuard guard(
            torch::kCPU, bf16 ? std::optional<c10::ScalarType>(torch::kBFloat16) : std::nullopt);
        auto mixed = checkpointed ? accel::checkpoint(
                                        saving, [&](const torch::Tensor& h) { return mixer(h); }, x)
                                  : mixer(x);
        auto dropped =
            checkpointed
                ? accel::checkpoint(
                      saving, [&](const torch::Tensor& h) { return block->forward(h); }, x2)
                : block->forward(x2);
        loss = mixed.to(torch::kFloat).pow(2).mean() + dropped.to(torch::kFloat).pow(2).mean();
      }
      loss.backward();
      std::vector<torch::Tensor> grads{x.grad().clone(), x2.grad().clone()};
      for (const auto& p : mixer->parameters()) grads.push_back(p.grad().clone());
      for (const auto& p : block->parameters()) grads.push_back(p.grad().clone());
      return grads;
    };
    SCOPED_TRACE(bf16 ? "bf16 autocast" : "fp32");
    expect_bitwise_equal(run(true), run(false));
  }
}

TEST(ActivationCheckpoint, SavedMatmulsKeepTheProductsAndNothingElse) {
  constexpr int64_t kBlocks = 8, kWidth = 256, kBatch = 64;
  auto model = blocks(kBlocks, kWidth);
  const auto x = torch::randn({kBatch, kWidth});
  auto kept = [&](const accel::CheckpointOptions& options) {
    accel::util::CountingCpuAllocator counter;
    const int64_t before = counter.live_bytes();
    torch::Tensor h = x;
    for (const auto& module : *model) {
      auto block = module.ptr<DropBlockImpl>();
      h = accel::checkpoint(
          options, [block](const torch::Tensor& in) { return block->forward(in); }, h);
    }
    const int64_t bytes = counter.live_bytes() - before;
    h.sum().backward();
    return bytes;
  };
  const int64_t full = kept({});
  const int64_t saving = kept(accel::CheckpointOptions().save_matmuls(true));
  // Per block, beside its input: up's output (two inputs' worth) and down's (one).
  const int64_t input = x.nbytes();
  // (A few bytes either way: small tensors, such as a scalar the first run caches, are counted
  // in one run and not the other.)
  EXPECT_GE(saving - full, kBlocks * 3 * input - 4096);
  EXPECT_LE(saving - full, kBlocks * 3 * input + (64 << 10));
}

TEST(ActivationCheckpoint, TheSelectivePolicyWrapsEveryKthBlockOnce) {
  auto model = blocks(6, 4);
  const auto policy = accel::CheckpointPolicy().mode("selective").every(3);
  EXPECT_EQ(accel::apply_activation_checkpointing(model, {"DropBlock"}, policy), 2);
  EXPECT_EQ(accel::apply_activation_checkpointing(model, {"DropBlock"}, policy), 0);
  std::vector<int64_t> positions;
  for (size_t i = 0; i < model->size(); ++i) {
    if (model[i]->as<accel::CheckpointWrapper>() != nullptr) positions.push_back(i);
  }
  EXPECT_EQ(positions, (std::vector<int64_t>{2, 5}));
}

TEST(ActivationCheckpoint, AnUnknownPolicyIsNamedWithTheChoices) {
  auto model = blocks(2, 4);
  auto error_of = [&](const accel::CheckpointPolicy& policy) {
    try {
      accel::apply_activation_checkpointing(model, {"DropBlock"}, policy);
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string();
  };
  // A name is parsed when it is set: an unknown one throws there, listing the modes.
  std::string error;
  try {
    accel::CheckpointPolicy().mode("ops");
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  }
  EXPECT_NE(error.find("CheckpointPolicy.mode 'ops' is not a checkpointing policy; choices: full "
                       "(every block), selective (every k-th block, CheckpointPolicy.every), op"),
            std::string::npos)
      << error;
  error = error_of(accel::CheckpointPolicy().mode("selective").every(0));
  EXPECT_NE(error.find("CheckpointPolicy.every is 0"), std::string::npos) << error;
  // In the options, before any Accelerator or model.
  try {
    accel::Accelerator accelerator(
        accel::AcceleratorOptions().cpu(true).activation_checkpointing_policy(
            accel::CheckpointPolicy().mode("sometimes")));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CheckpointPolicy.mode 'sometimes'"), std::string::npos);
  }
}

TEST(ActivationCheckpoint, EveryModeHasItsNameAndEveryNameParses) {
  for (const auto mode :
       {accel::CheckpointMode::Full, accel::CheckpointMode::Selective, accel::CheckpointMode::Op}) {
    ASSERT_NE(accel::to_string(mode), nullptr);
    EXPECT_EQ(accel::parse_checkpoint_mode(accel::to_string(mode)), mode);
    EXPECT_EQ(accel::CheckpointPolicy().mode(accel::to_string(mode)).mode(), mode);
  }
  EXPECT_EQ(accel::CheckpointPolicy().mode(), accel::CheckpointMode::Full);
  EXPECT_FALSE(accel::parse_checkpoint_mode("Full").has_value());
  EXPECT_FALSE(accel::parse_checkpoint_mode("").has_value());
}

TEST(ActivationCheckpoint, ForwardAndBackwardPeakIsTheInputsAndOneBlock) {
  // The most bytes held at once over a whole forward and backward, counted by the allocator: the
  // blocks' inputs, one block's recomputed activations and the gradients flowing through it.
  // A recomputed graph or output kept past its block's backward would add a block's
  // activations (10 inputs' worth here) per block.
  constexpr int64_t kBlocks = 16, kWidth = 256, kBatch = 64;
  auto model = blocks(kBlocks, kWidth);
  const auto x = torch::randn({kBatch, kWidth});
  for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
  auto peak = [&](bool checkpointed) {
    accel::util::CountingCpuAllocator counter;
    const int64_t before = counter.live_bytes();
    torch::Tensor h = x;
    for (const auto& module : *model) {
      auto block = module.ptr<DropBlockImpl>();
      h = checkpointed ? accel::checkpoint(
                             [block](const torch::Tensor& in) { return block->forward(in); }, h)
                       : block->forward(h);
    }
    h.sum().backward();
    h = torch::Tensor();
    return counter.peak_bytes() - before;
  };
  const int64_t plain = peak(false);
  const int64_t checkpointed = peak(true);
  const int64_t input = x.nbytes();
  // One block recomputed: up (2), gelu (2), dropout's mask and output (2 + 2), down, the sum:
  // 10 inputs' worth; backward's gradients through it: 6; the weight gradients accumulated
  // (2·256·512 floats, twice): 8 inputs' worth; the blocks' inputs and generator states: 16.
  const int64_t bound = (kBlocks + 10 + 6 + 8) * input + kBlocks * 4096;
  std::printf(
      "%lld blocks of width %lld, batch %lld: forward+backward peak %.2f MiB plain, %.2f MiB "
      "checkpointed (bound %.2f MiB; %.3f of plain)\n",
      static_cast<long long>(kBlocks), static_cast<long long>(kWidth),
      static_cast<long long>(kBatch), plain / 1048576.0, checkpointed / 1048576.0,
      bound / 1048576.0, static_cast<double>(checkpointed) / static_cast<double>(plain));
  EXPECT_LE(checkpointed, bound);
  EXPECT_LE(checkpointed * 3, plain);
}

}  // namespace
