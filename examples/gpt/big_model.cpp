// Big-model inference, end to end: a GPT-style decoder is saved as a sharded checkpoint, then
// built empty and loaded with load_checkpoint_and_dispatch under a CPU budget of a fraction of
// its size, the rest left on disk; its logits must equal the fully loaded model's.
//
//   big_model [--layers N] [--width N] [--cpu-fraction F] [--dir PATH]

#include "gpt.h"

#include <accel/accel.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  gpt::Config config;
  double cpu_fraction = 0.3;
  std::string dir = (std::filesystem::temp_directory_path() / "accel_gpt_checkpoint").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--layers") config.layers = std::atoll(argv[i + 1]);
    else if (flag == "--width") config.width = std::atoll(argv[i + 1]);
    else if (flag == "--cpu-fraction") cpu_fraction = std::atof(argv[i + 1]);
    else if (flag == "--dir") dir = argv[i + 1];
    else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  torch::NoGradGuard no_grad;

  // The model as trained: fully in memory, saved in shards.
  torch::manual_seed(0);
  gpt::Gpt reference(config);
  accel::Accelerator accelerator;
  const int64_t total = accel::compute_module_sizes(*reference)[""];
  accelerator.save_model(
      reference, dir, accel::SaveModelOptions().max_shard_size(std::to_string(total / 4 + 1) + "B"));
  const auto ids = torch::randint(config.vocab, {2, config.context}, torch::kLong);
  const auto expected = reference->forward(ids);

  // The same model built without memory, then loaded with most of it left on disk.
  auto model = accel::init_empty_weights([&] { return gpt::Gpt(config); });
  const auto cpu_budget = static_cast<int64_t>(cpu_fraction * static_cast<double>(total));
  const auto placed = accel::load_checkpoint_and_dispatch(
      model, dir,
      accel::DispatchOptions().device_map("auto").max_memory({{"cpu", cpu_budget}}).no_split_module_classes({"Block"}));
  std::cout << "model: " << total << " bytes; cpu budget " << cpu_budget << " bytes\ndevice map:\n";
  for (const auto& entry : placed.device_map) std::cout << "  " << (entry.first.empty() ? "\"\"" : entry.first) << ": " << entry.second << "\n";
  for (const auto& entry : placed.bytes_per_device) std::cout << "bytes on " << entry.first << ": " << entry.second << "\n";

  accel::reset_offload_statistics();
  const auto logits = model->forward(ids);
  const double difference = (logits - expected).abs().max().item<double>();
  const auto stats = accel::offload_statistics();
  std::cout << "max |logits - fully loaded logits| = " << difference << "\n"
            << "offloaded weights read: " << stats.materialisations << " (" << stats.bytes_read
            << " bytes), at most " << stats.peak_live_bytes << " bytes alive at once\n";
  // Every element within 1e-6, NaN-safe: allclose is false when either side has a NaN.
  if (logits.sizes() != expected.sizes() || !torch::allclose(logits, expected, 0, 1e-6)) {
    std::cerr << "big_model: logits differ from the fully loaded model's\n";
    return 1;
  }
  // The run must really have served weights from disk.
  const auto disk = placed.bytes_per_device.find("disk");
  if (disk == placed.bytes_per_device.end() || disk->second <= 0 || stats.bytes_read <= 0) {
    std::cerr << "big_model: nothing was offloaded to disk and read back\n";
    return 1;
  }
  std::filesystem::remove_all(dir);
  return 0;
}
