// accel-selfcheck: what `accel test` runs in the configured setup. Each check prints one line on
// the main process ("PASS name" / "FAIL name: why"); the exit code is non-zero if any failed.

#include <accel/accel.h>
#include <torch/torch.h>

#include <functional>
#include <iostream>
#include <numeric>
#include <string>

namespace {

class Range : public torch::data::datasets::Dataset<Range, int64_t> {
 public:
  explicit Range(size_t n) : n_(n) {}
  int64_t get(size_t i) override { return static_cast<int64_t>(i); }
  torch::optional<size_t> size() const override { return n_; }

 private:
  size_t n_;
};

// y = 2x + 3 from a fixed seed, as Accelerate's regression check: 8 samples per process, so
// every process's share weighs the same.
std::pair<torch::Tensor, torch::Tensor> regression_data(int64_t samples) {
  auto generator = torch::make_generator<torch::CPUGeneratorImpl>(42);
  auto x = torch::randn({samples, 1}, generator);
  return {x, 2 * x + 3 + 0.1 * torch::randn({samples, 1}, generator)};
}

}  // namespace

int main(int argc, char** argv) {
  // `accel env` asks what the LibTorch this was linked against sees, without starting a job.
  if (argc > 1 && std::string(argv[1]) == "--runtime-info") {
    std::cout << "cuda_available " << (torch::cuda::is_available() ? "yes" : "no") << "\n"
              << "cuda_devices " << torch::cuda::device_count() << "\n";
    return 0;
  }
  accel::Accelerator accelerator;
  const int64_t n = accelerator.num_processes();
  const int64_t rank = accelerator.process_index();
  int failures = 0;
  auto check = [&](const std::string& name, const std::function<std::string()>& body) {
    std::string problem;
    try {
      problem = body();
    } catch (const std::exception& e) {
      problem = e.what();
    }
    // Every process must agree that the check passed.
    const auto failed =
        accelerator.reduce(torch::tensor({problem.empty() ? 0 : 1}), accel::Reduction::Max);
    const bool ok = failed.item<int64_t>() == 0;
    if (!ok) ++failures;
    accelerator.print(ok ? "PASS " : "FAIL ", name,
                      ok ? "" : ": " + (problem.empty() ? "failed on another process" : problem));
  };

  accelerator.print("accel test: ", n, " process", n == 1 ? "" : "es", " on ",
                    accelerator.device().str());
  check("processes", [&]() -> std::string {
    auto ranks = accelerator.gather(torch::tensor({rank}));
    auto expected = torch::arange(n);
    return torch::equal(ranks, expected) ? "" : "ranks do not count 0..n-1";
  });
  check("collectives", [&]() -> std::string {
    auto mine = torch::arange(2, torch::kFloat) + 1 + 2 * rank;
    auto sum = accelerator.reduce(mine, accel::Reduction::Sum);
    const float first = static_cast<float>(n * n);  // sum of 1 + 2r over r
    if (sum[0].item<float>() != first) return "all-reduce sum is wrong";
    if (!torch::equal(accelerator.broadcast(mine.clone()), torch::tensor({1.0f, 2.0f}))) {
      return "broadcast is wrong";
    }
    if (accelerator.gather(mine).size(0) != 2 * n) return "all-gather is wrong";
    accelerator.wait_for_everyone();
    return "";
  });
  check("data sharding", [&]() -> std::string {
    auto loader =
        accelerator.prepare_data_loader<torch::data::samplers::SequentialSampler>(Range(100), 3);
    std::vector<int64_t> mine;
    for (auto& batch : *loader) {
      auto all = accelerator.gather_for_metrics(batch);
      mine.insert(mine.end(), all.begin(), all.end());
    }
    std::vector<int64_t> expected(100);
    std::iota(expected.begin(), expected.end(), 0);
    std::sort(mine.begin(), mine.end());
    return mine == expected ? "" : "the processes did not see every sample exactly once";
  });
  check("training equivalence", [&]() -> std::string {
    const int64_t share = 8;
    auto data = regression_data(share * n);
    // One process over the whole batch...
    auto a_ref = torch::zeros({1}, torch::requires_grad());
    auto b_ref = torch::zeros({1}, torch::requires_grad());
    torch::optim::SGD reference({a_ref, b_ref}, 0.1);
    for (int step = 0; step < 20; ++step) {
      reference.zero_grad();
      torch::mse_loss(data.first * a_ref + b_ref, data.second).backward();
      reference.step();
    }
    // ...and each process over its share, gradients averaged.
    auto model = torch::nn::Linear(1, 1);
    {
      torch::NoGradGuard no_grad;
      model->weight.zero_();
      model->bias.zero_();
    }
    accelerator.prepare(model);
    auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
    auto x = data.first.narrow(0, rank * share, share).to(accelerator.device());
    auto y = data.second.narrow(0, rank * share, share).to(accelerator.device());
    for (int step = 0; step < 20; ++step) {
      optimizer.zero_grad();
      accelerator.backward(torch::mse_loss(model->forward(x), y));
      optimizer.step();
    }
    const double a = model->weight.item<double>(), b = model->bias.item<double>();
    if (std::abs(a - a_ref.item<double>()) > 1e-5 || std::abs(b - b_ref.item<double>()) > 1e-5) {
      return "distributed training ended at a=" + std::to_string(a) + " b=" + std::to_string(b) +
             ", one process at a=" + std::to_string(a_ref.item<double>()) +
             " b=" + std::to_string(b_ref.item<double>());
    }
    return "";
  });
  accelerator.print(failures == 0 ? "accel test: all checks passed"
                                  : "accel test: " + std::to_string(failures) + " check(s) failed");
  return failures == 0 ? 0 : 1;
}
