// The job of bench/vs_pytorch written with accel, the twin of train_pytorch.py: the parallelism
// guide's GPT (examples/gpt/gpt.h) from init.safetensors, AdamW with weight decay, clipping every
// step, the global batches of batches.safetensors split over the data ranks. Writes result.json
// and weights.safetensors as train_pytorch.py does; compare.py sets the two side by side.
//   accel launch --num_processes 2 accel_vs_pytorch --layout fsdp --data D --out O [job flags]
// Layouts (train_pytorch.py's): fsdp (FULL_SHARD, a unit per block), tp (tp over every process,
// the plan of tensor_parallel_plan), tp_sp (with sequence parallelism), fsdp_tp (dp_shard 2 x tp
// 2), pp (1F1B over every process, --microbatches of the batch, the stages as train_pytorch.py's).

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
#include <optional>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string layout, data, out, optimizer = "adamw";
  gpt::Config config;
  int64_t batch = 8, steps = 4, microbatches = 4;
  double lr = 1e-3, weight_decay = 0.1, max_grad_norm = 0.5;
};

Args parse_args(int argc, char** argv) {
  Args args;
  std::map<std::string, int64_t*> integers = {
      {"--vocab", &args.config.vocab},   {"--context", &args.config.context},
      {"--width", &args.config.width},   {"--heads", &args.config.heads},
      {"--layers", &args.config.layers}, {"--batch", &args.batch},
      {"--steps", &args.steps},          {"--microbatches", &args.microbatches}};
  std::map<std::string, double*> reals = {{"--lr", &args.lr},
                                          {"--weight_decay", &args.weight_decay},
                                          {"--max_grad_norm", &args.max_grad_norm}};
  std::map<std::string, std::string*> texts = {{"--layout", &args.layout},
                                               {"--data", &args.data},
                                               {"--out", &args.out},
                                               {"--optimizer", &args.optimizer}};
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
  const std::vector<std::string> layouts = {"fsdp", "tp", "tp_sp", "fsdp_tp", "pp"};
  if (std::find(layouts.begin(), layouts.end(), args.layout) == layouts.end())
    throw std::invalid_argument("--layout must be fsdp, tp, tp_sp, fsdp_tp or pp, not " +
                                args.layout);
  return args;
}

/// The layout's options on `processes` processes: fsdp is FULL_SHARD with a unit per block
/// (FSDP2's fully_shard on each); tp and tp_sp a mesh of tp over every process; fsdp_tp
/// dp_shard x tp with tp 2 (FULL_SHARD over dp_shard, a unit per block).
accel::AcceleratorOptions options_for(const std::string& layout, int64_t processes) {
  auto options = accel::AcceleratorOptions().cpu(true);
  if (layout == "fsdp" || layout == "fsdp_tp")
    options.sharding_strategy("FULL_SHARD").fsdp_transformer_layer_cls_to_wrap({"Block"});
  if (layout == "tp" || layout == "tp_sp")
    options.parallelism_config(accel::ParallelismConfig().tp_size(processes));
  if (layout == "fsdp_tp")
    options.parallelism_config(accel::ParallelismConfig().dp_shard_size(processes / 2).tp_size(2));
  if (layout == "pp") options.parallelism_config(accel::ParallelismConfig().pp_size(processes));
  return options;
}

/// The GPT's token and position lookups, the first child of its pipeline.
struct EmbeddingsImpl : torch::nn::Module {
  EmbeddingsImpl(torch::nn::Embedding tokens, torch::nn::Embedding positions)
      : tokens(register_module("tokens", std::move(tokens))),
        positions(register_module("positions", std::move(positions))) {}
  torch::Tensor forward(const torch::Tensor& ids) {
    return tokens(ids) + positions(torch::arange(ids.size(1), ids.options()).expand_as(ids));
  }
  torch::nn::Embedding tokens, positions;
};
TORCH_MODULE(Embeddings);

/// The final norm and head, the last child.
struct OutputImpl : torch::nn::Module {
  OutputImpl(torch::nn::LayerNorm norm, torch::nn::Linear head)
      : norm(register_module("norm", std::move(norm))),
        head(register_module("head", std::move(head))) {}
  torch::Tensor forward(const torch::Tensor& x) { return head(norm(x)); }
  torch::nn::LayerNorm norm;
  torch::nn::Linear head;
};
TORCH_MODULE(Output);

/// The GPT as the Sequential prepare_pipeline cuts (embeddings, block0..blockN-1, output), its
/// modules shared with `model`; to_whole_names maps its names back to the GPT's.
torch::nn::Sequential as_sequential(gpt::Gpt& model) {
  torch::nn::Sequential sequential;
  sequential->push_back("embeddings", Embeddings(model->tokens, model->positions));
  for (size_t i = 0; i < model->blocks->size(); ++i)
    sequential->push_back("block" + std::to_string(i),
                          gpt::Block(model->blocks->ptr<gpt::BlockImpl>(i)));
  sequential->push_back("output", Output(model->norm, model->head));
  return sequential;
}

accel::NamedTensors to_whole_names(const accel::NamedTensors& in) {
  accel::NamedTensors out;
  for (const auto& [name, value] : in) {
    const auto dot = name.find('.');
    const std::string child = name.substr(0, dot), rest = name.substr(dot + 1);
    const bool outside_blocks = child == "embeddings" || child == "output";
    // "block3.up.weight" is "blocks.3.up.weight"
    out.emplace_back(outside_blocks ? rest : "blocks." + child.substr(5) + "." + rest, value);
  }
  return out;
}

/// train_pytorch.py's tensor_parallel_plan in accel's styles: q, k, v and up colwise, proj and
/// down rowwise, the token table rowwise (vocabulary-parallel), the head colwise with its output
/// gathered; with sequence parallelism the LayerNorms and the position table sequence_parallel.
accel::TensorParallelPlan tensor_parallel_plan(bool sequence_parallel) {
  accel::TensorParallelPlan plan{
      {"tokens", "embedding_rowwise"},        {"blocks.*.attention.q", "colwise"},
      {"blocks.*.attention.k", "colwise"},    {"blocks.*.attention.v", "colwise"},
      {"blocks.*.attention.proj", "rowwise"}, {"blocks.*.up", "colwise"},
      {"blocks.*.down", "rowwise"},           {"head", "colwise_rep"}};
  if (sequence_parallel) {
    for (const char* region : {"positions", "blocks.*.norm1", "blocks.*.norm2", "norm"})
      plan.add(region, "sequence_parallel");
  }
  return plan;
}

/// What a layout trains: under pp, this process's stages of the GPT cut as train_pytorch.py's
/// Stage (equal runs of blocks, the embeddings with the first); else the whole (split) model.
struct Prepared {
  torch::nn::Sequential stages{nullptr};
  std::optional<accel::Pipeline> pipeline;
};

Prepared prepare_layout(accel::Accelerator& accelerator, gpt::Gpt& model, const Args& args) {
  Prepared prepared;
  if (args.layout == "fsdp") {
    accelerator.prepare(model);
  } else if (args.layout == "pp") {
    prepared.stages = as_sequential(model);
    const int64_t processes = accelerator.num_processes();
    const int64_t per_stage = args.config.layers / processes;
    std::vector<std::string> cuts;
    for (int64_t stage = 1; stage < processes; ++stage)
      cuts.push_back("block" + std::to_string(stage * per_stage));
    prepared.pipeline =
        accelerator.prepare_pipeline(prepared.stages, accel::PipelineOptions()
                                                          .schedule("1F1B")
                                                          .microbatches(args.microbatches)
                                                          .split_before(cuts));
  } else {
    accelerator.prepare(model, tensor_parallel_plan(args.layout == "tp_sp"));
  }
  return prepared;
}

/// result.json (every step's loss and gradient norm, the median step time past the first, each
/// process's peak resident memory) and weights.safetensors, written by the main process.
void write_results(accel::Accelerator& accelerator, const std::string& out,
                   const accel::NamedTensors& weights, const std::vector<double>& losses,
                   const std::vector<double>& norms, const std::vector<double>& seconds) {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const auto peaks = accelerator.gather_object(static_cast<double>(usage.ru_maxrss) / 1024);
  if (!accelerator.is_main_process()) return;
  accel::save_safetensors(out + "/weights.safetensors", weights);
  std::vector<double> timed(seconds.size() > 1 ? seconds.begin() + 1 : seconds.begin(),
                            seconds.end());
  std::sort(timed.begin(), timed.end());
  const double median = timed.size() % 2 == 1
                            ? timed[timed.size() / 2]
                            : (timed[timed.size() / 2 - 1] + timed[timed.size() / 2]) / 2;
  nlohmann::json result = {
      {"losses", losses}, {"grad_norms", norms}, {"step_ms", median * 1e3}, {"peak_rss_mb", peaks}};
  std::ofstream(out + "/result.json") << result.dump();
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  torch::set_num_threads(1);  // as train_pytorch.py: one core per process
  accel::Accelerator accelerator(options_for(args.layout, accel::state().num_processes()));
  gpt::Gpt model(args.config);
  accel::load_checkpoint_in_model(model, args.data + "/init.safetensors");
  Prepared prepared = prepare_layout(accelerator, model, args);
  auto& stages = prepared.stages;
  auto& pipeline = prepared.pipeline;
  // What this process trains: its stages under pp, else its part of the whole model.
  const auto parameters = pipeline ? stages->parameters() : model->parameters();
  auto cross_entropy = [](const torch::Tensor& logits, const torch::Tensor& targets) {
    return torch::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
  };
  // One step's forward and backward; the loss (under pp, the microbatches' mean).
  auto forward_backward = [&](const torch::Tensor& tokens, const torch::Tensor& targets) {
    if (pipeline) return pipeline->step(tokens, targets, cross_entropy);
    auto loss = cross_entropy(model->forward(tokens), targets);
    accelerator.backward(loss);
    return loss;
  };
  const auto ids = accel::load_safetensors(args.data + "/batches.safetensors").at("ids");
  // The processes of one data rank (a tp group) read the same rows.
  const auto& mesh = accelerator.parallelism_config();
  const int64_t data_ranks = mesh ? mesh->data_parallel_size() : accelerator.num_processes();
  const int64_t rank = mesh ? accelerator.data_parallel_rank() * mesh->dp_shard_size() +
                                  accelerator.data_parallel_shard_rank()
                            : accelerator.process_index();
  const int64_t per_rank = args.batch / data_ranks;

  std::vector<double> losses, norms, seconds;
  // The loop, for the optimizer --optimizer names (accelerator.prepare keeps its type).
  auto train = [&](auto optimizer) {
    for (int64_t step = 0; step < args.steps; ++step) {
      const auto batch = ids[step].narrow(0, rank * per_rank, per_rank);
      const auto start = std::chrono::steady_clock::now();
      using torch::indexing::Slice;
      const auto loss = forward_backward(batch.index({Slice(), Slice(0, -1)}),
                                         batch.index({Slice(), Slice(1, torch::indexing::None)}));
      const double norm = accelerator.clip_grad_norm_(parameters, args.max_grad_norm);
      optimizer.step();
      optimizer.zero_grad();
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      losses.push_back(accelerator.reduce(loss.item<double>(), accel::Reduction::Mean));
      norms.push_back(norm);
    }
  };
  if (args.optimizer == "sgd") {
    train(accelerator.prepare(torch::optim::SGD(
        parameters,
        torch::optim::SGDOptions(args.lr).momentum(0.9).weight_decay(args.weight_decay))));
  } else {
    train(accelerator.prepare(torch::optim::AdamW(
        parameters, torch::optim::AdamWOptions(args.lr).weight_decay(args.weight_decay))));
  }

  const auto weights = pipeline ? to_whole_names(accelerator.get_state_dict(stages))
                                : accelerator.get_state_dict(model);
  write_results(accelerator, args.out, weights, losses, norms, seconds);
  return 0;
}
