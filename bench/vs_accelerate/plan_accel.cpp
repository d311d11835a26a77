// accel's half of the big-model planning comparison (plan.py is the other): builds the models
// plan.py builds, under the same names, and answers its cases with accel's compute_module_sizes,
// get_balanced_memory and infer_auto_device_map.
//   accel_vs_plan CASES.json RESULTS.json

#include <accel/accel.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include "job.h"

#include <fstream>
#include <iostream>

namespace {

// A Linear whose weight is another module's (a tie, as PyTorch's `b.weight = a.weight`):
// LibTorch registers a parameter once per name, so the tie is made when the module is built.
struct TiedLinearImpl : torch::nn::Module {
  TiedLinearImpl(torch::Tensor tied_weight, bool with_bias) {
    weight = register_parameter("weight", tied_weight);
    if (with_bias) bias = register_parameter("bias", torch::zeros({tied_weight.size(0)}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::nn::functional::linear(x, weight, bias);
  }
  torch::Tensor weight, bias;
};
TORCH_MODULE(TiedLinear);

// plan.py's Block: two Linear layers, the second optionally tied to another block's.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t width, torch::Tensor tied_linear2 = {}) {
    register_module("linear1", torch::nn::Linear(width, width));
    if (tied_linear2.defined()) {
      register_module("linear2", TiedLinear(tied_linear2, true));
    } else {
      register_module("linear2", torch::nn::Linear(width, width));
    }
  }
};
TORCH_MODULE(Block);

std::shared_ptr<torch::nn::Module> build(const std::string& name) {
  auto model = std::make_shared<torch::nn::Module>("Model");
  if (name == "mlp") return accel_vs::build_mlp(64, 3).ptr();
  if (name == "blocks" || name == "tied_blocks") {
    auto layer1 = model->register_module("layer1", Block(32));
    model->register_module("layer2", Block(32));
    torch::Tensor tie;
    if (name == "tied_blocks") tie = layer1->named_parameters()["linear2.weight"];
    model->register_module("layer3", Block(32, tie));
    return model;
  }
  if (name == "gpt_tied") {  // embedding and output layer share one matrix
    auto wte = model->register_module("wte", torch::nn::Embedding(100, 32));
    model->register_module("h0", Block(32));
    model->register_module("h1", Block(32));
    model->register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({32})));
    model->register_module("lm_head", TiedLinear(wte->weight, false));
    return model;
  }
  throw std::invalid_argument("unknown model " + name);
}

std::optional<torch::ScalarType> dtype_of(const nlohmann::json& text) {
  if (text.is_null()) return std::nullopt;
  if (text == "float16") return torch::kHalf;
  if (text == "bfloat16") return torch::kBFloat16;
  if (text == "float32") return torch::kFloat;
  throw std::invalid_argument("unknown dtype " + text.dump());
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 3) throw std::invalid_argument("usage: accel_vs_plan CASES.json RESULTS.json");
  nlohmann::json cases = nlohmann::json::parse(std::ifstream(argv[1]));
  nlohmann::json results = nlohmann::json::object();
  for (const auto& c : cases) {
    auto model = build(c.at("model"));
    accel::DeviceMapOptions options;
    options.max_memory(c.at("max_memory").get<accel::MaxMemory>())
        .no_split_module_classes(c.at("no_split").get<std::vector<std::string>>())
        .dtype(dtype_of(c.at("dtype")));
    nlohmann::json result;
    result["sizes"] = accel::compute_module_sizes(*model, options.dtype());
    if (c.at("balanced").get<bool>()) {
      options.max_memory(accel::get_balanced_memory(*model, options, c.at("low_zero")));
      result["balanced"] = options.max_memory();
    }
    result["device_map"] = accel::infer_auto_device_map(*model, options);
    results[c.at("name").get<std::string>()] = result;
  }
  std::ofstream(argv[2]) << results.dump(1);
  return 0;
} catch (const std::exception& error) {
  std::cerr << "accel_vs_plan: " << error.what() << "\n";
  return 1;
}
