// accel's half of the checkpoint crossover (crossover.py is the other): saves the job's MLP with
// accel's save_model, or loads a checkpoint, possibly written by Python Accelerate, with
// load_checkpoint_and_dispatch and writes the model's outputs.
//   accel_vs_checkpoint save   --init FILE --width W --depth D --out DIR [--max_shard_size S]
//   accel_vs_checkpoint logits --checkpoint PATH --width W --depth D --input FILE --out FILE
//                              [--device_map NAME=DEVICE,...] [--max_memory DEVICE=SIZE,...]

#include <accel/accel.h>
#include <torch/torch.h>

#include "job.h"

#include <iostream>
#include <map>
#include <sstream>
#include <string>

namespace {

// "a=b,c=d" -> {a: b, c: d}
std::map<std::string, std::string> parse_pairs(const std::string& text) {
  std::map<std::string, std::string> pairs;
  std::istringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    const auto equals = item.find('=');
    if (equals == std::string::npos) throw std::invalid_argument("expected NAME=VALUE: " + item);
    pairs[item.substr(0, equals)] = item.substr(equals + 1);
  }
  return pairs;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) throw std::invalid_argument("expected save or logits");
  const std::string mode = argv[1];
  std::map<std::string, std::string> flags;
  for (int i = 2; i + 1 < argc; i += 2) flags[argv[i]] = argv[i + 1];
  auto flag = [&](const std::string& name, const std::string& fallback = "") {
    auto found = flags.find(name);
    if (found != flags.end()) return found->second;
    if (fallback.empty()) throw std::invalid_argument(name + " is needed");
    return fallback;
  };
  const int64_t width = std::stoll(flag("--width")), depth = std::stoll(flag("--depth"));

  if (mode == "save") {
    accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
    auto model = accel_vs::build_mlp(width, depth);
    torch::NoGradGuard no_grad;
    const auto init = accel::load_safetensors(flag("--init"));
    for (auto& item : model->named_parameters()) item.value().copy_(init.at(item.key()));
    accelerator.save_model(
        model, flag("--out"),
        accel::SaveModelOptions().max_shard_size(flag("--max_shard_size", "10GB")));
    return 0;
  }
  if (mode != "logits") throw std::invalid_argument("unknown mode " + mode);
  auto model = accel::init_empty_weights([&] { return accel_vs::build_mlp(width, depth); });
  accel::DispatchOptions options;
  if (flags.count("--device_map")) options.device_map(parse_pairs(flags["--device_map"]));
  if (flags.count("--max_memory")) {
    options.max_memory(accel::parse_max_memory(parse_pairs(flags["--max_memory"])));
  }
  const auto placed = accel::load_checkpoint_and_dispatch(model, flag("--checkpoint"), options);
  torch::NoGradGuard no_grad;
  const auto input = accel::load_safetensors(flag("--input")).at("x");
  const auto logits = model->forward(input.to(placed.execution_device)).cpu();
  std::string devices;
  for (const auto& [name, device] : placed.device_map) {
    devices += (devices.empty() ? "" : ",") + (name.empty() ? "''" : name) + "=" + device;
  }
  accel::save_safetensors(flag("--out"), {{"logits", logits.contiguous()}},
                          {{"device_map", devices}});
  std::cout << "accel_vs_checkpoint: device map " << devices << "\n";
  return 0;
} catch (const std::exception& error) {
  std::cerr << "accel_vs_checkpoint: " << error.what() << "\n";
  return 1;
}
