// The job of bench/vs_pytorch written with accel, the twin of train_pytorch.py: the parallelism
// guide's GPT (examples/gpt/gpt.h) from init.safetensors, AdamW with weight decay, clipping every
// step, the global batches of batches.safetensors split over the data ranks. Writes result.json
// and weights.safetensors as train_pytorch.py does; compare.py sets the two side by side.
//   accel launch --num_processes 2 accel_vs_pytorch --layout fsdp --data D --out O [job flags]
// Layouts: fsdp (FULL_SHARD, a unit per block).

#include <accel/accel.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "../../examples/gpt/gpt.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string layout, data, out;
  gpt::Config config;
  int64_t batch = 8, steps = 4;
  double lr = 1e-3, weight_decay = 0.1, max_grad_norm = 0.5;
};

Args parse_args(int argc, char** argv) {
  Args args;
  std::map<std::string, int64_t*> integers = {
      {"--vocab", &args.config.vocab},   {"--context", &args.config.context},
      {"--width", &args.config.width},   {"--heads", &args.config.heads},
      {"--layers", &args.config.layers}, {"--batch", &args.batch},
      {"--steps", &args.steps}};
  std::map<std::string, double*> reals = {{"--lr", &args.lr},
                                          {"--weight_decay", &args.weight_decay},
                                          {"--max_grad_norm", &args.max_grad_norm}};
  std::map<std::string, std::string*> texts = {
      {"--layout", &args.layout}, {"--data", &args.data}, {"--out", &args.out}};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const std::string value = argv[++i];
    if (integers.count(flag)) {
      *integers[flag] = std::stoll(value);
    } else if (reals.count(flag)) {
      *reals[flag] = std::stod(value);
    } else if (texts.count(flag)) {
      *texts[flag] = value;
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  if (args.layout != "fsdp")
    throw std::invalid_argument("--layout must be fsdp, not " + args.layout);
  return args;
}

/// The layout's options: fsdp is FULL_SHARD with a unit per block (FSDP2's fully_shard on each).
accel::AcceleratorOptions options_for(const std::string& layout) {
  auto options = accel::AcceleratorOptions().cpu(true);
  if (layout == "fsdp")
    options.sharding_strategy("FULL_SHARD").fsdp_transformer_layer_cls_to_wrap({"Block"});
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  torch::set_num_threads(1);  // as train_pytorch.py: one core per process
  accel::Accelerator accelerator(options_for(args.layout));
  gpt::Gpt model(args.config);
  accel::load_checkpoint_in_model(model, args.data + "/init.safetensors");
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(
      model->parameters(), torch::optim::AdamWOptions(args.lr).weight_decay(args.weight_decay)));
  const auto ids = accel::load_safetensors(args.data + "/batches.safetensors").at("ids");
  const int64_t per_rank = args.batch / accelerator.num_processes();
  const int64_t rank = accelerator.process_index();

  std::vector<double> losses, norms, seconds;
  for (int64_t step = 0; step < args.steps; ++step) {
    const auto batch = ids[step].narrow(0, rank * per_rank, per_rank);
    const auto start = std::chrono::steady_clock::now();
    using torch::indexing::Slice;
    auto logits = model->forward(batch.index({Slice(), Slice(0, -1)}));
    auto loss = torch::cross_entropy_loss(
        logits.reshape({-1, args.config.vocab}),
        batch.index({Slice(), Slice(1, torch::indexing::None)}).reshape({-1}));
    accelerator.backward(loss);
    const double norm = accelerator.clip_grad_norm_(model->parameters(), args.max_grad_norm);
    optimizer.step();
    optimizer.zero_grad();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    losses.push_back(accelerator.reduce(loss.item<double>(), accel::Reduction::Mean));
    norms.push_back(norm);
  }

  const auto weights = accelerator.get_state_dict(model);
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const auto peaks = accelerator.gather_object(static_cast<double>(usage.ru_maxrss) / 1024);
  if (accelerator.is_main_process()) {
    accel::save_safetensors(args.out + "/weights.safetensors", weights);
    std::vector<double> timed(seconds.size() > 1 ? seconds.begin() + 1 : seconds.begin(),
                              seconds.end());
    std::sort(timed.begin(), timed.end());
    const double median = timed.size() % 2 == 1
                              ? timed[timed.size() / 2]
                              : (timed[timed.size() / 2 - 1] + timed[timed.size() / 2]) / 2;
    nlohmann::json result = {{"losses", losses},
                             {"grad_norms", norms},
                             {"step_ms", median * 1e3},
                             {"peak_rss_mb", peaks}};
    std::ofstream(args.out + "/result.json") << result.dump();
  }
  return 0;
}
