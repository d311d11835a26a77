// Loading a FULL_SHARD model that is never whole on any process, measured by the kernel: each
// process's resident anonymous memory (RssAnon) and mapped file pages (RssFile), sampled every
// millisecond while it builds the model with init_empty_weights, prepares it and loads a
// checkpoint of about 1.2 GB (two files and an index, the second in bf16), against the same
// process's figures after LibTorch and the process group are up (the baseline), and against what
// a whole load of the same model takes (the model's fp32 bytes).
//   accel launch --num_processes 2 build/bench/accel_bench_empty_load [DIR]

#include <accel/accel.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace {

constexpr int64_t kWidth = 4096, kDepth = 18;  // 302M parameters, 1.2 GB in fp32

torch::nn::Sequential build() {
  torch::nn::Sequential model;
  for (int64_t i = 0; i < kDepth; ++i) model->push_back(torch::nn::Linear(kWidth, kWidth));
  return model;
}

/// This process's RssAnon and RssFile in bytes, from /proc/self/status.
std::pair<int64_t, int64_t> resident() {
  std::ifstream status("/proc/self/status");
  std::string line;
  int64_t anon = 0, file = 0;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    fields >> key >> kib;
    if (key == "RssAnon:") anon = kib * 1024;
    if (key == "RssFile:") file = kib * 1024;
  }
  return {anon, file};
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/accel-bench-empty-load";
  accel::Accelerator accelerator(accel::AcceleratorOptions()
                                     .cpu(true)
                                     .sharding_strategy("FULL_SHARD")
                                     .fsdp_transformer_layer_cls_to_wrap({"Linear"}));
  const bool main = accelerator.is_main_process();
  if (main) {
    // The checkpoint, written a layer at a time so the writer holds one layer.
    std::filesystem::create_directories(dir);
    std::ofstream index(dir + "/model.safetensors.index.json");
    index << "{\"metadata\": {}, \"weight_map\": {";
    accel::NamedTensors first, second;
    for (int64_t i = 0; i < kDepth; ++i) {
      torch::nn::Linear layer(kWidth, kWidth);
      const bool in_first = i < kDepth / 2;
      auto& file = in_first ? first : second;
      const std::string name =
          in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
      for (const auto& item : layer->named_parameters()) {
        const std::string key = std::to_string(i) + "." + item.key();
        auto value = item.value().detach();
        file.emplace_back(key, in_first ? value : value.to(torch::kBFloat16));
        index << (i == 0 && item.key() == "weight" ? "" : ", ") << "\"" << key << "\": \"" << name
              << "\"";
      }
    }
    index << "}}";
    index.close();
    accel::save_safetensors(dir + "/model-00001-of-00002.safetensors", first);
    first.clear();
    accel::save_safetensors(dir + "/model-00002-of-00002.safetensors", second);
  }
  accelerator.wait_for_everyone();

  const auto baseline = resident();
  std::atomic<bool> done{false};
  int64_t peak_anon = 0, peak_file = 0;
  std::thread sampler([&] {
    while (!done.load()) {
      const auto now = resident();
      peak_anon = std::max(peak_anon, now.first);
      peak_file = std::max(peak_file, now.second);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  auto model = accel::init_empty_weights(build);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), {}));
  const auto loaded = accel::load_checkpoint_in_model(model, dir);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done = true;
  sampler.join();
  const int64_t model_bytes = kDepth * (kWidth * kWidth + kWidth) * 4;
  const int64_t unit = (kWidth * kWidth + kWidth) * 4;
  const int64_t n = accelerator.num_processes();
  std::printf(
      "rank %lld of %lld: %.1f MiB model (fp32), unit %.1f MiB; prepare + load %.2f s, read "
      "%.1f MiB; RssAnon peak %.1f MiB above the baseline (bound 1/N + a unit: %.1f MiB), "
      "RssFile peak %.1f MiB above the baseline (bound a unit: %.1f MiB)\n",
      static_cast<long long>(accelerator.process_index()), static_cast<long long>(n),
      mib(model_bytes), mib(unit), seconds, mib(loaded.bytes_read), mib(peak_anon - baseline.first),
      mib(model_bytes / n + unit), mib(peak_file - baseline.second), mib(unit));
  accelerator.wait_for_everyone();
  if (main) std::filesystem::remove_all(dir);
  return 0;
}
