#pragma once

// Where a prepared loader stands in its passes: what DataLoader and StreamLoader share and what
// does not depend on the dataset type. One set of saved keys serves both loaders.

#include <accel/detail/loader_preparation.h>

#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>

namespace accel {
namespace detail {

/// A loader's pass (its epoch), a skip that skip_first_batches() or a resume asked for, and the
/// generator state the pass's order was drawn from. save() writes them with the batches the
/// process has taken of the pass; load() reads them back, and the next start_pass() continues
/// the saved pass.
class PassPosition {
 public:
  enum class Kind { map_style, stream };

  /// How a pass starts: the batches to skip, whether load() ran before it, and whether it
  /// continues a saved pass mid-way (loaded, with batches to skip).
  struct Start {
    size_t skip = 0;
    bool loaded = false;
    bool resumed = false;
  };

  explicit PassPosition(Kind kind) : kind_(kind) {}

  /// Takes the pending skip and the loaded mark. A pass that is not resumed synchronizes
  /// rng_types' generators first (every process starts it alike); a resumed one keeps those
  /// load_state put back as they were at the save.
  Start start_pass(const LoaderContext& context);
  /// The pass ended: the next one is the following epoch.
  void finish_pass() { ++epoch_; }

  size_t epoch() const { return epoch_; }
  void set_epoch(size_t epoch) { epoch_ = epoch; }
  void skip_first_batches(size_t n) { skip_ = n; }
  /// The skip the next pass will take.
  size_t pending_skip() const { return skip_; }

  /// The generator state the current pass's order was drawn from (undefined: none yet).
  const torch::Tensor& generator() const { return generator_; }
  void set_generator(torch::Tensor state) { generator_ = std::move(state); }

  /// Writes the pass, `batches_done` of it, the processes that shared it and the generator.
  void save(torch::serialize::OutputArchive& archive, size_t batches_done,
            const ShardingOptions& sharding) const;
  /// Reads what save() wrote, for a run sharded as `sharding`: a map-style loader saved on
  /// another number of processes resumes at the round that holds its first unstarted batch; a
  /// stream (whose rounds hold one batch per process) is refused. Nothing changes if a read fails.
  void load(torch::serialize::InputArchive& archive, const ShardingOptions& sharding);

 private:
  const char* generator_key() const;

  Kind kind_;
  size_t epoch_ = 0;
  size_t skip_ = 0;
  torch::Tensor generator_;
  bool loaded_ = false;  // load() ran: the next pass continues a saved one
};

/// A whole number a loader's save_state wrote into `archive` as a one-element tensor.
int64_t read_count(torch::serialize::InputArchive& archive, const char* key);

}  // namespace detail
}  // namespace accel
