// A prepared loader's pass position and its saved keys, one definition for both loaders.

#include <accel/detail/pass_position.h>

#include <c10/util/Exception.h>

#include <utility>

namespace accel {
namespace detail {

PassPosition::Start PassPosition::start_pass(const LoaderContext& context) {
  Start start;
  start.skip = std::exchange(skip_, 0);
  start.loaded = std::exchange(loaded_, false);
  start.resumed = start.loaded && start.skip > 0;
  if (!start.resumed && context.synchronize_generators) context.synchronize_generators();
  return start;
}

const char* PassPosition::generator_key() const {
  return kind_ == Kind::stream ? "pass_generator" : "epoch_generator";
}

void PassPosition::save(torch::serialize::OutputArchive& archive, size_t batches_done,
                        const ShardingOptions& sharding) const {
  archive.write("epoch", torch::tensor(static_cast<int64_t>(epoch_)));
  archive.write("batches_done", torch::tensor(static_cast<int64_t>(batches_done)));
  archive.write("num_processes", torch::tensor(sharding.num_processes));
  if (kind_ == Kind::stream) archive.write("stream", torch::tensor(int64_t{1}));
  if (generator_.defined()) archive.write(generator_key(), generator_);
}

void PassPosition::load(torch::serialize::InputArchive& archive, const ShardingOptions& sharding) {
  const auto epoch = static_cast<size_t>(read_count(archive, "epoch"));
  auto skip = static_cast<size_t>(read_count(archive, "batches_done"));
  int64_t saved_processes = -1;  // a checkpoint that did not say
  torch::Tensor value;
  if (archive.try_read("num_processes", value)) saved_processes = value.item<int64_t>();
  torch::Tensor generator;
  archive.try_read(generator_key(), generator);
  if (kind_ == Kind::stream) {
    TORCH_CHECK(saved_processes == sharding.num_processes, "accel: a prepared stream was saved on ",
                saved_processes, " processes and resumes on ", sharding.num_processes,
                "; its rounds hold one batch per process, so resume it on ", saved_processes);
  } else if (!sharding.split_batches && saved_processes > 0) {
    // Each process takes every n-th batch: the saved run had started batches_done * n_saved of
    // the epoch's batches, and this one resumes at the round holding the first unstarted one.
    skip =
        skip * static_cast<size_t>(saved_processes) / static_cast<size_t>(sharding.num_processes);
  }
  epoch_ = epoch;
  skip_ = skip;
  if (generator.defined()) generator_ = std::move(generator);
  loaded_ = true;
}

int64_t read_count(torch::serialize::InputArchive& archive, const char* key) {
  torch::Tensor value;
  archive.read(key, value);
  return value.item<int64_t>();
}

}  // namespace detail
}  // namespace accel
