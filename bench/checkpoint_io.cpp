// save_state / load_state throughput against a raw write / read of the same number of bytes, in
// the same process, interleaved; prints the medians and their ratios (target >= 0.8).
//
//   accel_bench_checkpoint_io [megabytes=256] [repeats=15] [folder=/tmp]
//
// The raw write is one fwrite of the bytes plus fsync (save_state fsyncs too); the raw read is one
// fread into a buffer. load_state reads through the page cache, as the raw read does, and copies
// into the model's tensors. Each repeat writes both, then reads raw, state, state, raw: on a VM
// the first read after the writes runs slower, and the order must not favour either side. Disk
// writes are noisy here; 15 repeats keep the medians steady.

#include <accel/accel.h>

#include "bench_util.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

namespace {

struct Blob : torch::nn::Module {
  explicit Blob(int64_t megabytes) {
    for (int64_t i = 0; i < megabytes / 16; ++i) {
      register_parameter("w" + std::to_string(i), torch::rand({4, 1024, 1024}));  // 16 MB each
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t megabytes = argc > 1 ? std::atoll(argv[1]) : 256;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 15;
  const std::filesystem::path root = std::filesystem::path(argc > 3 ? argv[3] : "/tmp") /
                                     ("accel_bench_ckpt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(root);

  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  Blob model(megabytes);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model.parameters(), 0.1));
  const size_t bytes = static_cast<size_t>(megabytes) << 20;
  std::vector<char> buffer(bytes, 1);

  const auto raw = (root / "raw.bin").string();
  const auto ckpt = (root / "ckpt").string();
  std::vector<double> raw_write, save, raw_read, load;
  auto read_raw = [&] {
    raw_read.push_back(accel_bench::seconds([&] {
      std::FILE* f = std::fopen(raw.c_str(), "rb");
      if (std::fread(buffer.data(), 1, bytes, f) != bytes) std::abort();
      std::fclose(f);
    }));
  };
  auto read_state = [&] {
    load.push_back(accel_bench::seconds([&] { accelerator.load_state(ckpt); }));
  };
  for (int r = 0; r < repeats; ++r) {
    raw_write.push_back(accel_bench::seconds([&] {
      std::FILE* f = std::fopen(raw.c_str(), "wb");
      std::fwrite(buffer.data(), 1, bytes, f);
      std::fflush(f);
      ::fsync(::fileno(f));
      std::fclose(f);
    }));
    save.push_back(accel_bench::seconds([&] { accelerator.save_state(ckpt); }));
    // Mirrored order: whichever read runs first after the writes pays for that alike.
    read_raw();
    read_state();
    read_state();
    read_raw();
  }
  std::filesystem::remove_all(root);

  const double mb = static_cast<double>(megabytes);
  const double w = accel_bench::median(raw_write), s = accel_bench::median(save);
  const double rr = accel_bench::median(raw_read), l = accel_bench::median(load);
  std::printf("checkpoint of %lld MB, median of %d\n", static_cast<long long>(megabytes), repeats);
  std::printf("  raw write+fsync %8.1f MB/s   save_state %8.1f MB/s   ratio %.2f\n", mb / w, mb / s,
              w / s);
  std::printf("  raw read        %8.1f MB/s   load_state %8.1f MB/s   ratio %.2f\n", mb / rr,
              mb / l, rr / l);
  return 0;
}
