// Which batches each process reads: a port of Accelerate's BatchSamplerShard rules, so prepared
// loaders hand out exactly the batches Accelerate would.

#include <accel/data_loader.h>
#include <accel/operations.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/util/Exception.h>

#include <mutex>

namespace accel {
namespace detail {
namespace {

// The sampler's batches for one epoch: consecutive runs of batch_size, the last one shorter
// unless drop_last drops it.
std::vector<std::vector<size_t>> sampler_batches(const std::vector<size_t>& order,
                                                 size_t batch_size, bool drop_last) {
  std::vector<std::vector<size_t>> batches;
  for (size_t begin = 0; begin < order.size(); begin += batch_size) {
    const size_t end = std::min(order.size(), begin + batch_size);
    if (drop_last && end - begin < batch_size) break;
    batches.emplace_back(order.begin() + begin, order.begin() + end);
  }
  return batches;
}

std::vector<std::vector<size_t>> shard_whole_batches(const std::vector<size_t>& order,
                                                     const ShardingOptions& o) {
  const size_t n = static_cast<size_t>(o.num_processes);
  const size_t rank = static_cast<size_t>(o.process_index);
  const size_t b = o.batch_size;
  const auto batches = sampler_batches(order, b, o.drop_last);
  std::vector<std::vector<size_t>> mine;
  // Full rounds (n batches, the last of them full) go out as they are.
  const size_t full_rounds =
      batches.size() / n -
      ((batches.size() % n == 0 && !batches.empty() && batches.back().size() < b) ? 1 : 0);
  for (size_t round = 0; round < full_rounds; ++round) mine.push_back(batches[round * n + rank]);
  if (o.drop_last) return mine;
  const size_t first_unsent = full_rounds * n;
  if (first_unsent >= batches.size()) return mine;
  if (!o.even_batches) {
    if (first_unsent + rank < batches.size()) mine.push_back(batches[first_unsent + rank]);
    return mine;
  }
  // Complete the last round: every process gets one more batch, filled by cycling through the
  // first n * b indices of the epoch (repeated when the epoch is shorter than that).
  std::vector<size_t> initial;
  for (size_t i = 0; i < std::min(n, batches.size()); ++i) {
    initial.insert(initial.end(), batches[i].begin(), batches[i].end());
  }
  while (initial.size() < n * b) {
    const size_t have = initial.size();
    for (size_t i = 0; i < have; ++i) initial.push_back(initial[i]);
  }
  size_t cycle = 0;
  for (size_t slot = 0; slot < n; ++slot) {
    std::vector<size_t> batch;
    if (first_unsent + slot < batches.size()) batch = batches[first_unsent + slot];
    while (batch.size() < b) batch.push_back(initial[cycle++]);
    if (slot == rank) mine.push_back(std::move(batch));
  }
  return mine;
}

std::vector<std::vector<size_t>> shard_split_batches(const std::vector<size_t>& order,
                                                     const ShardingOptions& o) {
  const size_t n = static_cast<size_t>(o.num_processes);
  const size_t rank = static_cast<size_t>(o.process_index);
  const size_t b = o.batch_size;
  const size_t part = b / n;
  const auto batches = sampler_batches(order, b, o.drop_last);
  std::vector<std::vector<size_t>> mine;
  auto take = [&](const std::vector<size_t>& batch) {
    const size_t begin = std::min(batch.size(), part * rank);
    const size_t end = std::min(batch.size(), part * (rank + 1));
    mine.emplace_back(batch.begin() + begin, batch.begin() + end);
  };
  for (const auto& batch : batches) {
    if (batch.size() == b) take(batch);
  }
  if (batches.empty() || batches.back().size() == b) return mine;
  const auto& last = batches.back();
  if (!o.even_batches) {
    if (last.size() > part * rank) take(last);
    return mine;
  }
  std::vector<size_t> initial = batches.front();
  while (initial.size() < b) {
    const size_t have = initial.size();
    for (size_t i = 0; i < have; ++i) initial.push_back(initial[i]);
  }
  std::vector<size_t> completed = last;
  completed.insert(completed.end(), initial.begin(), initial.end());
  take(completed);
  return mine;
}

}  // namespace

std::vector<std::vector<size_t>> shard_batches(const std::vector<size_t>& order,
                                               const ShardingOptions& options) {
  TORCH_CHECK(options.batch_size > 0, "accel: invalid batch_size: 0 (expected > 0)");
  TORCH_CHECK(options.num_processes >= 1 && options.process_index >= 0 &&
                  options.process_index < options.num_processes,
              "accel: invalid process index ", options.process_index, " of ",
              options.num_processes);
  if (options.num_processes == 1)
    return sampler_batches(order, options.batch_size, options.drop_last);
  if (options.split_batches) {
    TORCH_CHECK(options.batch_size % static_cast<size_t>(options.num_processes) == 0,
                "accel: invalid batch_size: ", options.batch_size,
                " with split_batches (expected a "
                "multiple of the number of processes, ",
                options.num_processes, ")");
    return shard_split_batches(order, options);
  }
  return shard_whole_batches(order, options);
}

int64_t sharding_remainder(size_t dataset_size, const ShardingOptions& options) {
  if (options.drop_last) return -1;
  const size_t global_batch = options.split_batches
                                  ? options.batch_size
                                  : options.batch_size * static_cast<size_t>(options.num_processes);
  return static_cast<int64_t>(dataset_size % global_batch);
}

ScopedDefaultGenerator::ScopedDefaultGenerator(uint64_t seed)
    : saved_state_(default_generator_state()) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(seed);
}

ScopedDefaultGenerator::ScopedDefaultGenerator(const torch::Tensor& state)
    : saved_state_(default_generator_state()) {
  set_default_generator_state(state);
}

ScopedDefaultGenerator::~ScopedDefaultGenerator() { set_default_generator_state(saved_state_); }

torch::Tensor default_generator_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_default_generator_state(const torch::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace detail
}  // namespace accel
