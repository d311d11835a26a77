// accel's half of fused_vs_pytorch.py: runs each case's 20 gradients through a prepared LibTorch
// optimizer (so through accel's fused step) and through LibTorch's own optimizer, and writes the
// final parameters of both.
//   accel_vs_fused CASES.json DIR

#include <accel/accel.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

namespace {

template <typename O, typename Options>
void run(accel::Accelerator& accelerator, std::vector<torch::Tensor> params,
         std::vector<torch::Tensor> libtorch_params, Options options,
         const std::map<std::string, torch::Tensor>& inputs, int64_t steps) {
  auto optimizer = accelerator.prepare(O(params, options));
  if (!optimizer.fused()) throw std::runtime_error("the prepared optimizer is not fused");
  O libtorch(libtorch_params, options);
  for (int64_t step = 0; step < steps; ++step) {
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& grad = inputs.at("grad" + std::to_string(step) + "_" + std::to_string(i));
      params[i].mutable_grad() = grad.clone();
      libtorch_params[i].mutable_grad() = grad.clone();
    }
    optimizer.step();
    libtorch.step();
  }
}

void save(const std::string& path, const std::vector<torch::Tensor>& params) {
  accel::NamedTensors out;
  for (size_t i = 0; i < params.size(); ++i) {
    out.emplace_back("param" + std::to_string(i), params[i].detach());
  }
  accel::save_safetensors(path, out);
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 3) throw std::invalid_argument("usage: accel_vs_fused CASES.json DIR");
  const auto spec = nlohmann::json::parse(std::ifstream(argv[1]));
  const std::string dir = argv[2];
  const int64_t steps = spec.at("steps");
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  int number = 0;
  for (const auto& c : spec.at("cases")) {
    const std::string prefix = dir + "/case" + std::to_string(number++);
    const auto inputs = accel::load_safetensors(prefix + "_inputs.safetensors");
    std::vector<torch::Tensor> params, libtorch_params;
    for (int64_t i = 0; i < spec.at("parameters").get<int64_t>(); ++i) {
      params.push_back(inputs.at("param" + std::to_string(i)).clone().requires_grad_(true));
      libtorch_params.push_back(params.back().detach().clone().requires_grad_(true));
    }
    const std::string name = c.at("optimizer");
    const double lr = c.at("lr"), weight_decay = c.value("weight_decay", 0.0);
    const auto betas = c.value("betas", std::vector<double>{0.9, 0.999});
    if (name == "AdamW" || name == "Adam") {
      auto configure = [&](auto options) {
        return options.weight_decay(weight_decay)
            .amsgrad(c.value("amsgrad", false))
            .eps(c.value("eps", 1e-8))
            .betas({betas[0], betas[1]});
      };
      if (name == "AdamW") {
        run<torch::optim::AdamW>(accelerator, params, libtorch_params,
                                 configure(torch::optim::AdamWOptions(lr)), inputs, steps);
      } else {
        run<torch::optim::Adam>(accelerator, params, libtorch_params,
                                configure(torch::optim::AdamOptions(lr)), inputs, steps);
      }
    } else if (name == "SGD") {
      run<torch::optim::SGD>(accelerator, params, libtorch_params,
                             torch::optim::SGDOptions(lr)
                                 .momentum(c.value("momentum", 0.0))
                                 .dampening(c.value("dampening", 0.0))
                                 .nesterov(c.value("nesterov", false))
                                 .weight_decay(weight_decay),
                             inputs, steps);
    } else {
      throw std::invalid_argument("unknown optimizer " + name);
    }
    save(prefix + "_accel.safetensors", params);
    save(prefix + "_libtorch.safetensors", libtorch_params);
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "accel_vs_fused: " << error.what() << "\n";
  return 1;
}
