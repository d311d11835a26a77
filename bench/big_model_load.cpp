// Loading a large checkpoint with load_checkpoint_and_dispatch, against reading the same bytes
// with plain read(2) calls. Every measurement runs in a fresh child process (this binary,
// re-executed), so each peak resident size (VmHWM) is that run's alone. Prints medians and ratios.
//
//   accel_bench_big_model_load [--layers 10] [--width 2048] [--cpu-budget-mb 512] [--repeats 5]
//                              [--dir /tmp]
//
// The default model is a GPT-style decoder of about 2 GB (float32). Runs, interleaved:
//   raw-stream     read every shard through one 8 MB buffer: the cost of the bytes alone
//   raw-memory     read every shard into one buffer as large as the checkpoint
//   full           init_empty_weights + dispatch with everything on the CPU
//   offload        init_empty_weights + dispatch("auto") under a CPU budget, the rest on disk,
//                  then the first forward (which reads every disk weight once)
//   zero-copy      dispatch on the CPU with zero_copy, for this model and one of 1 layer
// The shards are read from the page cache (they were just written), as the raw reads are.

#include "../examples/gpt/gpt.h"
#include "bench_util.h"

#include <accel/accel.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

gpt::Config config_of(int64_t layers, int64_t width) {
  gpt::Config config;
  config.layers = layers;
  config.width = width;
  config.heads = 16;
  return config;
}

std::vector<std::string> shard_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

int64_t peak_resident_kb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

// Reads every file in 8 MB pieces, into `buffer` at `advance ? total : 0`; returns the bytes read.
size_t read_all(const std::vector<std::string>& files, char* buffer, bool advance) {
  constexpr size_t kChunk = 8 << 20;
  size_t total = 0;
  for (const auto& file : files) {
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) std::abort();
    for (ssize_t n; (n = ::read(fd, buffer + (advance ? total : 0), kChunk)) > 0;)
      total += static_cast<size_t>(n);
    ::close(fd);
  }
  return total;
}

// ---- child side: one measurement, printed as "key=value" lines -------------------------------

int child(const std::vector<std::string>& args) {
  const std::string& mode = args.at(0);
  const std::string dir = args.at(1);
  std::map<std::string, double> report;
  if (mode == "raw-stream" || mode == "raw-memory") {
    const auto files = shard_files(dir);
    size_t bytes = 0;
    for (const auto& f : files) bytes += fs::file_size(f);
    report["seconds"] = accel_bench::seconds([&] {
      size_t read = 0;
      if (mode == "raw-stream") {
        std::vector<char> buffer(8 << 20);
        read = read_all(files, buffer.data(), false);
      } else {
        std::unique_ptr<char[]> buffer(new char[bytes]);  // untouched until read into
        read = read_all(files, buffer.get(), true);
      }
      if (read != bytes) std::abort();
    });
  } else {
    const auto config = config_of(std::atoll(args.at(2).c_str()), std::atoll(args.at(3).c_str()));
    torch::NoGradGuard no_grad;
    auto model = accel::init_empty_weights([&] { return gpt::Gpt(config); });
    accel::DispatchOptions options;
    if (mode == "offload") {
      options.device_map("auto")
          .max_memory({{"cpu", std::atoll(args.at(4).c_str())}})
          .no_split_module_classes({"Block"});
    } else {
      options.device_map(accel::DeviceMap{{"", "cpu"}}).zero_copy(mode == "zero-copy");
    }
    accel::DispatchResult placed;
    report["load_seconds"] = accel_bench::seconds(
        [&] { placed = accel::load_checkpoint_and_dispatch(model, dir, options); });
    for (const auto& entry : placed.bytes_per_device)
      report["bytes_" + entry.first] = static_cast<double>(entry.second);
    if (mode != "zero-copy") {
      torch::manual_seed(1);
      // A short prompt: the first forward's cost is then mostly getting the weights, not the math.
      const auto ids = torch::randint(config.vocab, {1, 4}, torch::kLong);
      torch::Tensor logits;
      report["forward_seconds"] = accel_bench::seconds([&] { logits = model->forward(ids); });
      // Every element goes to the parent, which compares the offloaded run's with the full one's.
      torch::save(logits, dir + "/logits_" + mode + ".pt");
      const auto stats = accel::offload_statistics();
      report["offload_reads"] = static_cast<double>(stats.materialisations);
      report["offload_peak_live_bytes"] = static_cast<double>(stats.peak_live_bytes);
    }
  }
  report["peak_rss_kb"] = static_cast<double>(peak_resident_kb());
  for (const auto& entry : report) std::printf("%s=%.9g\n", entry.first.c_str(), entry.second);
  return 0;
}

// ---- parent side -------------------------------------------------------------------------------

using Report = std::map<std::string, double>;

Report run_child(const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    ::close(pipe_fds[0]);
    std::vector<std::string> argv_strings{"accel_bench_big_model_load", "--child"};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    std::_Exit(127);
  }
  ::close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
    output.append(buffer, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "big_model_load: child '" << args.at(0) << "' failed:\n" << output;
    std::exit(1);
  }
  Report report;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) report[line.substr(0, eq)] = std::atof(line.c_str() + eq + 1);
  }
  return report;
}

void save_checkpoint(const std::string& dir, const gpt::Config& config) {
  torch::manual_seed(0);
  gpt::Gpt model(config);
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  accelerator.save_model(model, dir, accel::SaveModelOptions().max_shard_size("512MB"));
}

// The last full and offloaded runs' logits on `dir`, compared element by element: the same
// shape, no NaN, and equal within 1e-6 (a NaN anywhere makes this false).
bool same_logits(const std::string& dir) {
  torch::Tensor full, offloaded;
  torch::load(full, dir + "/logits_full.pt");
  torch::load(offloaded, dir + "/logits_offload.pt");
  if (full.sizes() != offloaded.sizes() || full.isnan().any().item<bool>()) return false;
  return torch::allclose(offloaded, full, /*rtol=*/0, /*atol=*/1e-6);
}

double median_of(const std::vector<Report>& runs, const std::string& key) {
  std::vector<double> values;
  for (const auto& r : runs) values.push_back(r.at(key));
  return accel_bench::median(values);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--child")
    return child(std::vector<std::string>(argv + 2, argv + argc));
  int64_t layers = 10, width = 2048, budget_mb = 512;
  int repeats = 5;
  std::string base = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--layers")
      layers = std::atoll(argv[i + 1]);
    else if (flag == "--width")
      width = std::atoll(argv[i + 1]);
    else if (flag == "--cpu-budget-mb")
      budget_mb = std::atoll(argv[i + 1]);
    else if (flag == "--repeats")
      repeats = std::atoi(argv[i + 1]);
    else if (flag == "--dir")
      base = argv[i + 1];
    else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  const fs::path root = fs::path(base) / ("accel_bench_big_model_" + std::to_string(::getpid()));
  const std::string large = (root / "large").string(), small = (root / "small").string();
  const std::string L = std::to_string(layers), W = std::to_string(width);
  const int64_t budget = budget_mb << 20;
  {
    torch::NoGradGuard no_grad;
    save_checkpoint(large, config_of(layers, width));
    save_checkpoint(small, config_of(1, width));
  }
  double large_bytes = 0, small_bytes = 0;
  for (const auto& f : shard_files(large)) large_bytes += static_cast<double>(fs::file_size(f));
  for (const auto& f : shard_files(small)) small_bytes += static_cast<double>(fs::file_size(f));

  run_child({"raw-stream", large});  // warms the page cache for everyone
  std::vector<Report> stream, memory, full, offload, zero_large, zero_small;
  for (int r = 0; r < repeats; ++r) {
    stream.push_back(run_child({"raw-stream", large}));
    memory.push_back(run_child({"raw-memory", large}));
    full.push_back(run_child({"full", large, L, W}));
    offload.push_back(run_child({"offload", large, L, W, std::to_string(budget)}));
    if (!same_logits(large) || offload.back().at("bytes_disk") <= 0 ||
        offload.back().at("offload_reads") <= 0) {
      std::cerr << "big_model_load: the offloaded run's logits differ from the fully loaded "
                   "model's, or nothing was offloaded to disk\n";
      return 1;
    }
    zero_large.push_back(run_child({"zero-copy", large, L, W}));
    zero_small.push_back(run_child({"zero-copy", small, "1", W}));
  }
  fs::remove_all(root);

  const double mb = 1024.0 * 1024.0;
  const double t_stream = median_of(stream, "seconds"), t_memory = median_of(memory, "seconds");
  const double t_full = median_of(full, "load_seconds");
  const double t_offload =
      median_of(offload, "load_seconds") + median_of(offload, "forward_seconds");
  std::printf(
      "checkpoint: %d layers x width %d, %.0f MB; medians of %d runs, each in a fresh process\n",
      static_cast<int>(layers), static_cast<int>(width), large_bytes / mb, repeats);
  std::printf("  raw read, 8 MB buffer       %7.3f s  %7.0f MB/s  peak RSS %6.0f MB\n", t_stream,
              large_bytes / mb / t_stream, median_of(stream, "peak_rss_kb") / 1024);
  std::printf("  raw read into memory        %7.3f s  %7.0f MB/s  peak RSS %6.0f MB\n", t_memory,
              large_bytes / mb / t_memory, median_of(memory, "peak_rss_kb") / 1024);
  std::printf(
      "  full load on the CPU        %7.3f s  %7.0f MB/s  peak RSS %6.0f MB  throughput vs raw "
      "read into memory %.2f\n",
      t_full, large_bytes / mb / t_full, median_of(full, "peak_rss_kb") / 1024, t_memory / t_full);
  std::printf("    its first forward (4 tokens) %.3f s\n", median_of(full, "forward_seconds"));
  std::printf(
      "  cpu budget %lld MB + disk:   load %.3f s + first forward %.3f s = %.3f s to first forward;"
      " peak RSS %.0f MB (%.0f MB on cpu, %.0f MB on disk); logits equal the full load's\n",
      static_cast<long long>(budget_mb), median_of(offload, "load_seconds"),
      median_of(offload, "forward_seconds"), t_offload, median_of(offload, "peak_rss_kb") / 1024,
      median_of(offload, "bytes_cpu") / mb, median_of(offload, "bytes_disk") / mb);
  std::printf("    %.0f offloaded weights read, at most %.0f MB of them alive at once\n",
              median_of(offload, "offload_reads"),
              median_of(offload, "offload_peak_live_bytes") / mb);
  std::printf(
      "    time to first forward / raw read, 8 MB buffer %.2f; / (raw read into memory + full "
      "model's forward) %.2f\n",
      t_offload / t_stream, t_offload / (t_memory + median_of(full, "forward_seconds")));
  const double z_large = median_of(zero_large, "load_seconds"),
               z_small = median_of(zero_small, "load_seconds");
  std::printf(
      "  zero-copy load (no first touch): %.0f MB in %.4f s, %.0f MB in %.4f s: ratio %.2f for "
      "%.1fx the bytes\n",
      large_bytes / mb, z_large, small_bytes / mb, z_small, z_large / z_small,
      large_bytes / small_bytes);
  return 0;
}
