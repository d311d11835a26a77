// The job of the self-healing test (self_healing.sh): 4 epochs of a shuffled loader, dropout,
// AdamW with a step scheduler and bf16 autocast on the CPU, resuming by itself when
// `accel launch --max_restarts` restarts it. It can be told to kill itself with SIGKILL: on a
// given start, at a given step, on one rank, on every rank, or inside a save. At the end each
// process writes its weights and optimizer state as raw bytes to OUT/final_<rank>.bin; the main
// process logs every step's loss (JSON lines).
//
// Two ways of counting, as RESUME_WORKER_UNIT says:
//   - "optimizer" (the default): accumulation 2, a save every 4 optimizer steps (between
//     windows), kills and losses at optimizer steps;
//   - "micro": accumulation 3, clip_grad_norm_ on every micro-step, a save every 5 micro-steps
//     from inside accumulate() (mostly inside a window), kills and losses at micro-steps.
//   resume_worker OUT [START:STEP:WHO ...]     WHO: a rank, "all", "machine<N>" (every rank of
//                                              machine N), or "save"

#include <accel/accel.h>
#include <torch/torch.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

constexpr int kEpochs = 4;

struct Kill {
  int64_t start = 0, step = 0;
  std::string who;
};

std::vector<Kill> parse_kills(int argc, char** argv) {
  std::vector<Kill> kills;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto first = arg.find(':'), second = arg.find(':', first + 1);
    kills.push_back({std::stoll(arg.substr(0, first)),
                     std::stoll(arg.substr(first + 1, second - first - 1)),
                     arg.substr(second + 1)});
  }
  return kills;
}

class Regression : public torch::data::datasets::Dataset<Regression> {
 public:
  Regression() {
    auto generator = torch::make_generator<torch::CPUGeneratorImpl>(3);
    x_ = torch::randn({96, 8}, generator);
    y_ = x_.sum(1, true) * 0.5 + 0.1 * torch::randn({96, 1}, generator);
  }
  torch::data::Example<> get(size_t i) override {
    return {x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return 96; }

 private:
  torch::Tensor x_, y_;
};

// The same 96 samples as a stream: 12 chunks of 8, read by a ChunkDataset in a random chunk order
// drawn as each pass starts (RESUME_WORKER_DATA=stream).
class RegressionChunks : public torch::data::datasets::ChunkDataReader<torch::data::Example<>> {
 public:
  using BatchType = std::vector<torch::data::Example<>>;
  BatchType read_chunk(size_t index) override {
    BatchType examples;
    for (size_t i = index * 8; i < index * 8 + 8; ++i) examples.push_back(data_.get(i));
    return examples;
  }
  size_t chunk_count() override { return 12; }
  void reset() override {}

 private:
  Regression data_;
};

// Registered for checkpointing: when armed, its save (called by the main process in the middle
// of save_state, after the models and optimizers are written) kills the process.
struct SaveKiller {
  bool armed = false;
  void save(torch::serialize::OutputArchive& archive) const {
    if (armed) std::raise(SIGKILL);
    archive.write("unused", torch::zeros({1}));
  }
  void load(torch::serialize::InputArchive&) {}
};

void write_tensor(std::ofstream& out, const torch::Tensor& tensor) {
  const auto bytes = tensor.detach().contiguous();
  out.write(static_cast<const char*>(bytes.data_ptr()),
            static_cast<std::streamsize>(bytes.numel() * bytes.element_size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: resume_worker OUT [START:STEP:WHO ...]\n";
    return 2;
  }
  const fs::path out = argv[1];
  const auto kills = parse_kills(argc, argv);
  const char* unit_text = std::getenv("RESUME_WORKER_UNIT");
  const bool micro = unit_text != nullptr && std::string(unit_text) == "micro";
  const int64_t accumulation = micro ? 3 : 2;
  const int64_t save_every = micro ? 5 : 4;
  const char* restart_text = std::getenv("ACCEL_RESTART_COUNT");
  const int64_t start = restart_text != nullptr ? std::atoll(restart_text) : 0;

  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .gradient_accumulation_steps(accumulation)
                                     .mixed_precision("bf16")
                                     .seed(1234)
                                     .log_with({"jsonl"})
                                     .project_config(accel::ProjectConfiguration()
                                                         .project_dir((out / "project").string())
                                                         .logging_dir((out / "logs").string())
                                                         .automatic_checkpoint_naming(true)
                                                         .total_limit(2)));
  const int64_t rank = accelerator.process_index();
  const char* per_machine_text = std::getenv("LOCAL_WORLD_SIZE");
  const int64_t machine = rank / (per_machine_text != nullptr ? std::atoll(per_machine_text) : 1);
  auto should_die = [&](int64_t step, bool in_save) {
    for (const auto& kill : kills) {
      if (kill.start != start || kill.step != step) continue;
      if (in_save) return kill.who == "save" && accelerator.is_main_process();
      if (kill.who == "all" || kill.who == std::to_string(rank)) return true;
      if (kill.who == "machine" + std::to_string(machine)) return true;
    }
    return false;
  };

  accel::set_seed(7);  // the initial weights: the same on every start
  torch::nn::Sequential model(torch::nn::Linear(8, 32), torch::nn::ReLU(), torch::nn::Dropout(0.2),
                              torch::nn::Linear(32, 1));
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(
      torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(1e-2)));
  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, 5, 0.7));
  const char* data_text = std::getenv("RESUME_WORKER_DATA");
  const bool stream = data_text != nullptr && std::string(data_text) == "stream";
  auto loader = accelerator.prepare(
      torch::data::make_data_loader(Regression().map(torch::data::transforms::Stack<>()), 4));
  namespace datasets = torch::data::datasets;
  using Chunks = datasets::ChunkDataset<RegressionChunks, torch::data::samplers::RandomSampler,
                                        torch::data::samplers::SequentialSampler>;
  auto chunk_loader = accelerator.prepare_data_loader(
      datasets::make_shared_dataset<Chunks>(
          RegressionChunks(), torch::data::samplers::RandomSampler(0),
          torch::data::samplers::SequentialSampler(0), datasets::ChunkDatasetOptions(1, 4)),
      accel::StreamLoaderOptions(4));
  SaveKiller save_killer;
  accelerator.register_for_checkpointing(save_killer);
  accelerator.init_trackers("resume", {{"epochs", kEpochs}});

  const bool resumed = accelerator.resume_if_possible();
  // Micro-steps are accumulate() calls; optimizer steps every `accumulation` of them.
  int64_t steps = micro ? accelerator.step() : accelerator.step() / accumulation;
  const std::string unit = micro ? "micro-step " : "optimizer step ";
  // One write per line: the processes share stderr.
  std::cerr << ("start " + std::to_string(start) + " rank " + std::to_string(rank) +
                (resumed ? " resumed at " : " fresh at ") + unit + std::to_string(steps) + "\n");

  // A step done: its loss logged, then the kill or the save it is due for.
  auto count_step = [&](const torch::Tensor& loss) {
    ++steps;
    accelerator.log({{"loss", loss}}, steps);
    if (should_die(steps, false)) std::raise(SIGKILL);
    if (steps % save_every == 0) {
      save_killer.armed = should_die(steps, true);
      accelerator.save_state();
    }
  };
  // One micro-step on a batch, whichever loader gave it.
  auto train_step = [&](const torch::data::Example<>& batch) {
    {
      torch::Tensor loss;
      bool stepped = false;
      {
        auto step = accelerator.accumulate(model);
        loss = torch::mse_loss(accelerator.forward(model, batch.data), batch.target);
        accelerator.backward(loss);
        if (micro) accelerator.clip_grad_norm_(model->parameters(), 0.5);
        optimizer.step();
        scheduler.step();
        optimizer.zero_grad();
        stepped = accelerator.sync_gradients();
        // Counting micro-steps, this runs inside the accumulate() scope: mostly inside a window.
        if (micro) count_step(loss);
      }
      if (!micro && stepped) count_step(loss);
    }
  };
  auto train = [&](auto& epoch_loader, auto as_example) {
    for (auto epoch = static_cast<int>(epoch_loader.epoch()); epoch < kEpochs; ++epoch) {
      for (auto& raw : epoch_loader) {
        const torch::data::Example<> batch = as_example(raw);
        train_step(batch);
      }
    }
  };
  if (stream) {
    // Only the stream is read; the map-style loader stays unused (and is saved at its start).
    train(*chunk_loader, [](const std::vector<torch::data::Example<>>& examples) {
      return torch::data::transforms::Stack<>().apply_batch(examples);
    });
  } else {
    train(*loader, [](const torch::data::Example<>& batch) { return batch; });
  }

  std::ofstream final_state(out / ("final_" + std::to_string(rank) + ".bin"), std::ios::binary);
  for (const auto& p : model->parameters()) write_tensor(final_state, p);
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      auto found = optimizer.state().find(p.unsafeGetTensorImpl());
      if (found == optimizer.state().end()) continue;
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      write_tensor(final_state, state.exp_avg());
      write_tensor(final_state, state.exp_avg_sq());
      final_state << "step " << state.step() << "\n";
    }
  }
  accelerator.end_training();
  std::cerr << ("rank " + std::to_string(rank) + " finished at " + unit + std::to_string(steps) +
                "\n");
  return 0;
}
