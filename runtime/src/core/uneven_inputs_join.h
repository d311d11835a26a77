#pragma once

// join_uneven_inputs (DDP's Join): which models a JoinScope joins, how many synchronising
// backwards this process ran inside it, and the rounds at its end in which a process that ran out
// of batches shadows the others' all-reduces. JoinScope opens and closes it; backward() counts
// this process as still training.

#include "optim/training_loop.h"
#include "prepared_models.h"

#include <accel/sharding_strategy.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace accel {
namespace core {

class UnevenInputsJoin {
 public:
  UnevenInputsJoin(optim::LoaderPosition& loaders, PreparedModels& models)
      : loaders_(loaders), models_(models) {}

  /// Opens the scope for `models` (all prepared and data-parallel: a run `sharded_by` a
  /// strategy is refused).
  void begin(const std::vector<const torch::nn::Module*>& models, std::optional<bool> even_batches,
             std::optional<ShardingStrategy> sharded_by);
  /// Shadows the other processes' gradient all-reduces until every process has finished, then
  /// every model continues from the process that trained longest. `host_group`: null on one
  /// process.
  void end(const std::vector<const torch::nn::Module*>& models, c10d::ProcessGroup* host_group);
  /// Inside the scope.
  bool open() const { return !models_joined_.empty(); }
  /// In a synchronising backward of `syncing`: counts this process as still training (a small
  /// all-reduce the others' end() waits on) when one of them is joined.
  void count_backward(const std::vector<PreparedModel*>& syncing, c10d::ProcessGroup& host_group);

 private:
  /// Where the loaders read the even_batches the scope gives them.
  optim::LoaderPosition& loaders_;
  PreparedModels& models_;
  std::vector<const torch::nn::Module*> models_joined_;
  int64_t backwards_ = 0;
};

}  // namespace core
}  // namespace accel
