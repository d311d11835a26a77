// A training program for the checkpoint tests, started by `accel launch` (1 or 2 processes):
//   checkpoint_worker train <steps> <out>               train, then write the final state to out
//   checkpoint_worker save-at <k> <dir>                 train k steps, save_state(dir), exit
//   checkpoint_worker save-each <k> <dir>               train k steps, save_state(dir/step_<i>)
//                                                       after every step i < k, exit
//   checkpoint_worker resume <dir> <steps> <out>        load_state(dir), train, write to out
//   checkpoint_worker save-and-list <k> <dir>           train k steps, save_state(dir), then print
//                                                       "remaining: ..." (the targets the rest of
//                                                       the epoch holds, over all processes)
//   checkpoint_worker load-and-list <dir>               load_state(dir) allowing another process
//                                                       count, print the same
//   checkpoint_worker save-loop <dir>                   save_state(dir) over and over, the weights
//                                                       and momentum all equal to the save's number
//   checkpoint_worker check <dir>                       load_state(dir); print "consistent <n>" if
//                                                       every weight and momentum equals one n
// A step is one accumulate() micro-step (ACCEL_GRADIENT_ACCUMULATION_STEPS sets how many make an
// optimizer step); it clips the gradient norm and saves from inside accumulate(), as real loops
// do. With CHECKPOINT_SAVE_ON_EACH_NODE=1 the project configuration has save_on_each_node.
// "The final state" is the weights, Adam's state, the learning rate and a draw from every
// process's generator, as one safetensors file, so runs compare byte for byte.

#include <accel/accel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

/// y = sum(x) + noise, 48 samples of 4 features, from a fixed seed.
class SumDataset : public torch::data::datasets::Dataset<SumDataset> {
 public:
  SumDataset() {
    auto generator = torch::make_generator<torch::CPUGeneratorImpl>(3);
    x_ = torch::randn({48, 4}, generator);
    y_ = x_.sum(1, true) + 0.1 * torch::randn({48, 1}, generator);
  }
  torch::data::Example<> get(size_t i) override {
    return {x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return 48; }

 private:
  torch::Tensor x_, y_;
};

struct NetImpl : torch::nn::Module {
  NetImpl() {
    torch::manual_seed(11);  // the same initial weights on every process and run
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    drop = register_module("drop", torch::nn::Dropout(0.25));
    fc2 = register_module("fc2", torch::nn::Linear(8, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2->forward(drop->forward(torch::relu(fc1->forward(x))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Net);

/// Prints the given batches' targets from all processes, sorted, as one line.
void print_targets(accel::Accelerator& accelerator, const std::vector<torch::Tensor>& batches) {
  std::vector<float> targets;
  for (const auto& target : batches) {
    auto all = accelerator.gather(target).flatten().contiguous();
    targets.insert(targets.end(), all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
  }
  std::sort(targets.begin(), targets.end());
  std::ostringstream line;
  line << "remaining:" << std::fixed << std::setprecision(5);
  for (float value : targets) line << ' ' << value;
  accelerator.print(line.str());
}

/// `save_at` 0: save after every step before the last, each into its own folder under save_dir.
int train(const std::string& load_from, int steps, int save_at, const std::string& save_dir,
          const std::string& out, bool list_rest_of_epoch = false) {
  accel::Accelerator accelerator;
  const char* on_each_node = std::getenv("CHECKPOINT_SAVE_ON_EACH_NODE");
  accelerator.project_configuration().save_on_each_node(on_each_node != nullptr &&
                                                        std::string(on_each_node) == "1");
  Net model;
  // Dropout draws from each process's own generator: resuming must restore them all.
  torch::manual_seed(100 + static_cast<uint64_t>(accelerator.process_index()));
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::Adam(model->parameters(), 0.01));
  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, 3, 0.7));
  auto loader = accelerator.prepare_data_loader(
      SumDataset().map(torch::data::transforms::Stack<>()), 8);  // shuffled (RandomSampler)
  if (!load_from.empty()) {
    accelerator.load_state(
        load_from, accel::LoadStateOptions().allow_process_count_change(list_rest_of_epoch));
  }
  if (list_rest_of_epoch && !load_from.empty()) {
    std::vector<torch::Tensor> rest;
    for (auto& batch : *loader) rest.push_back(batch.target);
    print_targets(accelerator, rest);
    return 0;
  }

  int done = 0;
  bool listing = false;  // after the save, only collect the rest of the epoch
  std::vector<torch::Tensor> rest;
  while (done < steps) {
    for (auto& batch : *loader) {
      if (listing) {
        rest.push_back(batch.target);
        continue;
      }
      auto step = accelerator.accumulate(model);
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      accelerator.clip_grad_norm_(model->parameters(), 0.5);
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      ++done;
      if (save_at == 0 && done < steps) {
        accelerator.save_state(save_dir + "/step_" + std::to_string(done));
      }
      if (done == save_at) {
        accelerator.save_state(save_dir);
        if (!list_rest_of_epoch) return 0;
        listing = true;
      }
      if (done == steps) break;
    }
    if (listing) {
      print_targets(accelerator, rest);
      return 0;
    }
  }

  if (out.empty()) return 0;  // save-each: the checkpoints were the point
  // The weights whole (gathered under FULL_SHARD); the optimizer's state for whatever parameters
  // it holds (under a sharding strategy each process's shards: gathered from every process).
  accel::NamedTensors state;
  for (const auto& p : accelerator.get_state_dict(model))
    state.emplace_back("param." + p.first, p.second);
  size_t i = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const auto key = static_cast<void*>(p.unsafeGetTensorImpl());
      auto& s = static_cast<torch::optim::AdamParamState&>(*optimizer.state().at(key));
      const auto prefix = "adam." + std::to_string(i++) + ".";
      state.emplace_back(prefix + "step", torch::tensor(static_cast<int64_t>(s.step())));
      state.emplace_back(prefix + "exp_avg", accelerator.gather(s.exp_avg().flatten()));
      state.emplace_back(prefix + "exp_avg_sq", accelerator.gather(s.exp_avg_sq().flatten()));
    }
  }
  state.emplace_back(
      "lr", torch::tensor(optimizer.param_groups()[0].options().get_lr(), torch::kFloat64));
  state.emplace_back("rng", accelerator.gather(torch::rand({3})));
  state.emplace_back("accelerator_step", torch::tensor(accelerator.step()));
  if (accelerator.is_main_process()) accel::save_safetensors(out, state);
  accelerator.wait_for_everyone();
  return 0;
}

struct Big : torch::nn::Module {
  Big() {
    a = register_parameter("a", torch::zeros({2048, 1024}));
    b = register_parameter("b", torch::zeros({2048, 1024}));
  }
  torch::Tensor a, b;
};

/// Weights and momentum buffers all set to `value`, for the crash test.
void fill(Big& model, torch::optim::SGD& optimizer, double value) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    p.fill_(value);
    const auto key = static_cast<void*>(p.unsafeGetTensorImpl());
    static_cast<torch::optim::SGDParamState&>(*optimizer.state().at(key))
        .momentum_buffer()
        .fill_(value);
  }
}

int save_loop_or_check(const std::string& dir, bool check) {
  accel::Accelerator accelerator;
  Big model;
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(
      torch::optim::SGD(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)));
  // One step creates the momentum buffers.
  for (auto& p : model.parameters()) p.mutable_grad() = torch::zeros_like(p);
  optimizer.step();
  if (check) {
    accelerator.load_state(dir);
    const double value = model.a[0][0].item<double>();
    for (auto& p : model.parameters()) {
      const auto key = static_cast<void*>(p.unsafeGetTensorImpl());
      const auto& momentum =
          static_cast<torch::optim::SGDParamState&>(*optimizer.state().at(key)).momentum_buffer();
      if (!p.eq(value).all().item<bool>() || !momentum.eq(value).all().item<bool>()) {
        std::cout << "inconsistent checkpoint\n";
        return 1;
      }
    }
    std::cout << "consistent " << value << std::endl;
    return 0;
  }
  for (int n = 1;; ++n) {
    fill(model, optimizer, n);
    accelerator.save_state(dir);
    std::cout << "saved " << n << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "train" && argc == 4) return train("", std::atoi(argv[2]), -1, "", argv[3]);
    if (mode == "save-at" && argc == 4) return train("", 1 << 30, std::atoi(argv[2]), argv[3], "");
    if (mode == "save-each" && argc == 4) return train("", std::atoi(argv[2]), 0, argv[3], "");
    if (mode == "resume" && argc == 5) return train(argv[2], std::atoi(argv[3]), -1, "", argv[4]);
    if (mode == "save-and-list" && argc == 4) {
      return train("", 1 << 30, std::atoi(argv[2]), argv[3], "", true);
    }
    if (mode == "load-and-list" && argc == 3) return train(argv[2], 0, -1, "", "", true);
    if (mode == "save-loop" && argc == 3) return save_loop_or_check(argv[2], false);
    if (mode == "check" && argc == 3) return save_loop_or_check(argv[2], true);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: checkpoint_worker "
               "train|save-at|save-each|resume|save-and-list|load-and-list|save-loop|check ...\n";
  return 2;
}
