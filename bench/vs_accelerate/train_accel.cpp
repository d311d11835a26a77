// The job of bench/vs_accelerate written with accel, line for line the twin of
// train_accelerate.py: an MLP regression trained with AdamW, an LR schedule, gradient clipping and
// gradient accumulation, then evaluated with gather_for_metrics. compare_runs.py checks that the
// two agree.
//   accel launch [--num_processes N] accel_vs_train --data D --out O [options of job.py]

#include <accel/accel.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include "job.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

namespace {

struct Args {
  std::string data, out;
  int64_t width = 16, depth = 2, batch_size = 8, epochs = 2, accumulation = 2;
  double lr = 1e-2, max_grad_norm = 0.5;
  bool split_batches = false, uneven = false, no_eval = false;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--data")
      args.data = value();
    else if (flag == "--out")
      args.out = value();
    else if (flag == "--width")
      args.width = std::stoll(value());
    else if (flag == "--depth")
      args.depth = std::stoll(value());
    else if (flag == "--batch_size")
      args.batch_size = std::stoll(value());
    else if (flag == "--epochs")
      args.epochs = std::stoll(value());
    else if (flag == "--accumulation")
      args.accumulation = std::stoll(value());
    else if (flag == "--lr")
      args.lr = std::stod(value());
    else if (flag == "--max_grad_norm")
      args.max_grad_norm = std::stod(value());
    else if (flag == "--split_batches")
      args.split_batches = true;
    else if (flag == "--uneven")
      args.uneven = true;
    else if (flag == "--no_eval")
      args.no_eval = true;
    else
      throw std::invalid_argument("unknown argument " + flag);
  }
  if (args.data.empty() || args.out.empty())
    throw std::invalid_argument("--data and --out are needed");
  return args;
}

// job.py's lr_factor as a LibTorch scheduler, as PyTorch's LambdaLR applies it: after k steps
// the rate is base x factor(k). LibTorch calls get_lrs() before counting the step.
class InverseTimeDecay : public torch::optim::LRScheduler {
 public:
  InverseTimeDecay(torch::optim::Optimizer& optimizer, double base_lr)
      : LRScheduler(optimizer), base_lr_(base_lr) {}

 protected:
  std::vector<double> get_lrs() override {
    const double factor = 1.0 / (1.0 + 0.1 * (step_count_ + 1));
    return std::vector<double>(get_current_lrs().size(), base_lr_ * factor);
  }

 private:
  double base_lr_;
};

class TensorDataset : public torch::data::datasets::Dataset<TensorDataset> {
 public:
  explicit TensorDataset(const std::string& path) {
    auto tensors = accel::load_safetensors(path);
    x_ = tensors.at("x");
    y_ = tensors.at("y");
  }
  torch::data::Example<> get(size_t i) override {
    return {x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(x_.size(0)); }

 private:
  torch::Tensor x_, y_;
};

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) try {
  const Args args = parse_args(argc, argv);
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .gradient_accumulation_steps(args.accumulation)
                                     .split_batches(args.split_batches)
                                     .even_batches(!args.uneven));
  auto model = accel_vs::build_mlp(args.width, args.depth);
  {
    torch::NoGradGuard no_grad;
    const auto init = accel::load_safetensors(args.data + "/init.safetensors");
    for (auto& item : model->named_parameters()) item.value().copy_(init.at(item.key()));
  }
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(
      torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(args.lr)));
  auto scheduler = accelerator.prepare(InverseTimeDecay(optimizer, args.lr));
  using Sequential = torch::data::samplers::SequentialSampler;
  auto train = accelerator.prepare_data_loader<Sequential>(
      TensorDataset(args.data + "/train.safetensors").map(torch::data::transforms::Stack<>()),
      args.batch_size);
  auto evaluation = accelerator.prepare_data_loader<Sequential>(
      TensorDataset(args.data + "/eval.safetensors").map(torch::data::transforms::Stack<>()),
      args.batch_size);

  std::vector<double> losses, step_seconds;
  double first_step_wall = 0;
  for (int64_t epoch = 0; epoch < args.epochs; ++epoch) {
    auto last = std::chrono::steady_clock::now();
    for (auto& batch : *train) {
      torch::Tensor loss;
      {
        auto step = accelerator.accumulate(model);
        loss = torch::mse_loss(model->forward(batch.data), batch.target);
        accelerator.backward(loss);
        if (accelerator.sync_gradients()) {
          accelerator.clip_grad_norm_(model->parameters(), args.max_grad_norm);
        }
        optimizer.step();
        scheduler.step();
        optimizer.zero_grad();
      }
      losses.push_back(accelerator.reduce(loss.detach(), accel::Reduction::Mean).item<double>());
      const auto now = std::chrono::steady_clock::now();
      step_seconds.push_back(std::chrono::duration<double>(now - last).count());
      last = now;
      if (first_step_wall == 0) first_step_wall = wall_seconds();
    }
  }

  nlohmann::json result = {{"num_processes", accelerator.num_processes()},
                           {"losses", losses},
                           {"step_seconds", step_seconds},
                           {"first_step_wall", first_step_wall},
                           {"lr", optimizer.param_groups()[0].options().get_lr()}};
  if (!args.no_eval) {
    model->eval();
    torch::NoGradGuard no_grad;
    int64_t count = 0;
    double sse = 0;
    std::vector<double> squared_errors;
    for (auto& batch : *evaluation) {
      auto prediction = model->forward(batch.data);
      if (args.uneven) {
        // Processes hold different numbers of batches: gather once, after the loop.
        auto errors = (prediction - batch.target).pow(2).flatten().to(torch::kDouble).contiguous();
        squared_errors.insert(squared_errors.end(), errors.data_ptr<double>(),
                              errors.data_ptr<double>() + errors.numel());
      } else {
        auto [all_predictions, targets] = accelerator.gather_for_metrics(prediction, batch.target);
        count += targets.size(0);
        sse += (all_predictions - targets).pow(2).sum().item<double>();
      }
    }
    if (args.uneven) {
      squared_errors = accelerator.gather_for_metrics(squared_errors);
      count = static_cast<int64_t>(squared_errors.size());
      for (double e : squared_errors) sse += e;
    }
    result["eval_count"] = count;
    result["eval_sse"] = sse;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::vector<double> peak_rss_mib;
  for (double kib : accelerator.gather_object(static_cast<double>(usage.ru_maxrss))) {
    peak_rss_mib.push_back(kib / 1024);
  }
  result["peak_rss_mib"] = peak_rss_mib;

  accelerator.save_model(model, args.out + "/model");
  if (accelerator.is_main_process()) std::ofstream(args.out + "/result.json") << result.dump();
  return 0;
} catch (const std::exception& error) {
  std::cerr << "accel_vs_train: " << error.what() << "\n";
  return 1;
}
