// The data-bound case: a dataset whose every sample costs time to produce (decoding, augmenting;
// here a sleep plus a little tensor work), read through a prepared loader with workers(n) and
// through LibTorch's own loader with the same workers, batch size and sampler. Prints the median
// over interleaved repetitions of (prepared epoch time / LibTorch epoch time) for 0, 2 and 4
// workers. Target: <= 1.05 with workers (the same overlap as LibTorch's), ~1.0 without.
// Run: build/bench/accel_bench_data_loader [repetitions] [samples]

#include "bench_util.h"

#include <accel/accel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

class SlowDataset : public torch::data::datasets::Dataset<SlowDataset> {
 public:
  explicit SlowDataset(size_t size) : size_(size) {}
  torch::data::Example<> get(size_t index) override {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // the cost of reading a sample
    auto data = torch::full({3, 16, 16}, static_cast<float>(index)).mul_(0.5).add_(1);
    return {data, torch::tensor(static_cast<int64_t>(index % 10))};
  }
  torch::optional<size_t> size() const override { return size_; }

 private:
  size_t size_;
};

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 7;
  const size_t samples = argc > 2 ? static_cast<size_t>(std::atoll(argv[2])) : 2000;
  torch::set_num_threads(1);
  using Sequential = torch::data::samplers::SequentialSampler;
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  std::printf("data loader: %zu samples of 200 us each, batch 32\n", samples);
  for (size_t workers : {0, 2, 4}) {
    const auto options = torch::data::DataLoaderOptions(32).workers(workers);
    auto plain = torch::data::make_data_loader<Sequential>(
        SlowDataset(samples).map(torch::data::transforms::Stack<>()), options);
    auto prepared = accelerator.prepare_data_loader<Sequential>(
        SlowDataset(samples).map(torch::data::transforms::Stack<>()), options);
    double checksum_plain = 0, checksum_prepared = 0;
    std::vector<double> ratios, plain_times;
    for (int r = 0; r < repetitions; ++r) {
      const double t_plain = accel_bench::seconds([&] {
        for (auto& batch : *plain) checksum_plain += batch.target.sum().item<double>();
      });
      const double t_prepared = accel_bench::seconds([&] {
        for (auto& batch : *prepared) checksum_prepared += batch.target.sum().item<double>();
      });
      ratios.push_back(t_prepared / t_plain);
      plain_times.push_back(t_plain);
    }
    if (checksum_plain != checksum_prepared) {
      std::fprintf(stderr, "the loaders read different batches\n");
      return 1;
    }
    std::printf("workers %zu: LibTorch epoch %.3f s, prepared / LibTorch %.3f (median of %d)\n",
                workers, accel_bench::median(plain_times), accel_bench::median(ratios),
                repetitions);
  }
}
