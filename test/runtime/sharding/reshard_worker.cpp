// A training program for the resharding tests, started by `accel launch` on any process count,
// with the sharding strategy of ACCEL_SHARDING_STRATEGY (and ACCEL_FSDP_STATE_DICT_TYPE):
//   reshard_worker train <steps> <out>           train, write the final weights to out
//   reshard_worker save <steps> <dir>            train, save_state(dir), write the optimizer
//                                                state whole to <dir>.optimizer.safetensors
//   reshard_worker resume <dir> <steps> <out>    load_state(dir) allowing another process count,
//                                                write the optimizer state whole to
//                                                <out>.optimizer.safetensors, train, write the
//                                                final weights to out
// A step is one micro-step; accumulation 2, clipping on every micro-step, AdamW in two parameter
// groups. split_batches over a sequential sampler: the global batch of each step is the same on
// every process count. "Whole" optimizer state: each parameter's moments as the parameter is
// shaped, assembled from every process's shards, so that layouts compare.

#include <accel/accel.h>
#include <torch/torch.h>

#include "sharding/optimizer_resharding.h"
#include "sharding/optimizer_shards.h"
#include "sharding/optimizer_state_tensors.h"

#include <cstdlib>
#include <iostream>
#include <string>

namespace {

class Regression : public torch::data::datasets::Dataset<Regression> {
 public:
  Regression() {
    auto generator = torch::make_generator<torch::CPUGeneratorImpl>(5);
    x_ = torch::randn({64, 5}, generator);
    y_ = torch::sin(x_.sum(1, true)) + 0.1 * torch::randn({64, 1}, generator);
  }
  torch::data::Example<> get(size_t i) override {
    return {x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return 64; }

 private:
  torch::Tensor x_, y_;
};

/// Parameter counts (5*7 + 7 + 7*3 + 3 = 66 in the body, 3 + 1 in the head) that 4 does not
/// divide: shards end in padding on 4 processes, and differently on 2.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    torch::manual_seed(21);
    hidden = register_module("hidden", torch::nn::Linear(5, 7));
    middle = register_module("middle", torch::nn::Linear(7, 3));
    head = register_module("head", torch::nn::Linear(3, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return head(torch::tanh(middle(torch::tanh(hidden(x)))));
  }
  torch::nn::Linear hidden{nullptr}, middle{nullptr}, head{nullptr};
};
TORCH_MODULE(Net);

std::vector<torch::optim::OptimizerParamGroup> groups(Net& net) {
  std::vector<torch::Tensor> body;
  for (auto& p : net->hidden->parameters()) body.push_back(p);
  for (auto& p : net->middle->parameters()) body.push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> out;
  out.emplace_back(body, std::make_unique<torch::optim::AdamWOptions>(
                             torch::optim::AdamWOptions(3e-2).weight_decay(0.1)));
  out.emplace_back(net->head->parameters(), std::make_unique<torch::optim::AdamWOptions>(1e-2));
  return out;
}

template <typename Optimizer>
accel::NamedTensors whole_optimizer_state(accel::Accelerator& accelerator, Optimizer& optimizer) {
  std::vector<std::shared_ptr<accel::sharding::OptimizerShards>> shards;
  if (accel::sharding::shards_of(optimizer))
    shards.push_back(accel::sharding::shards_of(optimizer));
  const auto layout = accel::sharding::layout_of(optimizer, shards);
  accel::NamedTensors out;
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    for (size_t u = 0; u < layout.groups[g].size(); ++u) {
      const auto& param = optimizer.param_groups()[g].params()[u];
      auto& state = *optimizer.state().at(param.unsafeGetTensorImpl());
      const auto tensors = *accel::sharding::elementwise_state(state);
      for (size_t j = 0; j < tensors.size(); ++j) {
        if (!tensors[j]->defined()) continue;
        const auto flat = layout.slices > 1 ? accelerator.gather(tensors[j]->reshape(-1))
                                            : tensors[j]->reshape(-1);
        for (const auto& m : layout.groups[g][u].members) {
          out.emplace_back(
              std::to_string(g) + "." + std::to_string(m.index) + "." + std::to_string(j),
              flat.narrow(0, m.offset, m.numel).clone());
        }
      }
      const auto step = static_cast<torch::optim::AdamWParamState&>(state).step();
      for (const auto& m : layout.groups[g][u].members) {
        out.emplace_back(std::to_string(g) + "." + std::to_string(m.index) + ".step",
                         torch::tensor(step));
      }
    }
  }
  return out;
}

int run(const std::string& mode, const std::string& load_from, int steps, const std::string& out) {
  accel::Accelerator accelerator(
      accel::AcceleratorOptions().cpu(true).gradient_accumulation_steps(2).split_batches(true));
  Net net;
  accelerator.prepare(net);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(groups(net), {}));
  auto loader =
      accelerator.prepare(torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
          Regression().map(torch::data::transforms::Stack<>()), 8));
  auto write_optimizer = [&](const std::string& path) {
    const auto state = whole_optimizer_state(accelerator, optimizer);
    if (accelerator.is_main_process()) accel::save_safetensors(path, state);
  };
  if (!load_from.empty()) {
    accelerator.load_state(load_from, accel::LoadStateOptions().allow_process_count_change(true));
    write_optimizer(out + ".optimizer.safetensors");
  }
  int done = 0;
  while (done < steps) {
    for (auto& batch : *loader) {
      auto step = accelerator.accumulate(net);
      accelerator.backward(torch::mse_loss(net->forward(batch.data), batch.target));
      accelerator.clip_grad_norm_(net->parameters(), 0.5);
      optimizer.step();
      optimizer.zero_grad();
      if (++done == steps) break;
    }
  }
  if (mode == "save") {
    accelerator.save_state(out);
    write_optimizer(out + ".optimizer.safetensors");
    return 0;
  }
  const auto weights = accelerator.get_state_dict(net);
  if (accelerator.is_main_process()) accel::save_safetensors(out, weights);
  accelerator.wait_for_everyone();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if ((mode == "train" || mode == "save") && argc == 4) {
      return run(mode, "", std::atoi(argv[2]), argv[3]);
    }
    if (mode == "resume" && argc == 5) return run(mode, argv[2], std::atoi(argv[3]), argv[4]);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: reshard_worker train|save|resume ...\n";
  return 2;
}
