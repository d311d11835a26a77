// Accelerator::maybe_context_parallel and its scope (accel/context_parallel.h).

#include <accel/accelerator.h>
#include <accel/context_parallel.h>

#include "accelerator_impl.h"
#include "parallel/context_parallel.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

namespace accel {

struct ContextParallelScope::State {
  std::vector<torch::Tensor*> buffers;
  std::vector<torch::Tensor> originals;
  std::vector<bool> restore;
  c10d::ProcessGroup* previous = nullptr;
};

ContextParallelScope::ContextParallelScope(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
ContextParallelScope::ContextParallelScope(ContextParallelScope&& other) noexcept
    : state_(std::move(other.state_)) {}
ContextParallelScope::~ContextParallelScope() {
  if (!state_) return;
  parallel::set_context_group(state_->previous);
  for (size_t i = 0; i < state_->buffers.size(); ++i) {
    if (state_->restore[i]) *state_->buffers[i] = std::move(state_->originals[i]);
  }
}

ContextParallelScope Accelerator::maybe_context_parallel(
    const std::vector<torch::Tensor*>& buffers, const std::vector<int64_t>& buffer_seq_dims,
    const std::vector<torch::Tensor*>& no_restore_buffers) {
  TORCH_CHECK(buffers.size() == buffer_seq_dims.size(), "accel: maybe_context_parallel was given ",
              buffers.size(), " buffers and ", buffer_seq_dims.size(),
              " sequence dimensions; give one dimension per buffer");
  if (impl_->mesh == nullptr || !impl_->mesh->config().cp_enabled()) return ContextParallelScope();
  auto& group = *impl_->mesh->group(distributed::MeshGroup::cp);
  const int64_t cp = group.getSize(), rank = group.getRank();
  // Every shard is computed before any buffer changes: a refusal leaves them all as they were.
  std::vector<torch::Tensor> shards;
  for (size_t i = 0; i < buffers.size(); ++i) {
    TORCH_CHECK(buffers[i] != nullptr && buffers[i]->defined(),
                "accel: maybe_context_parallel's buffer ", i, " is empty");
    shards.push_back(parallel::load_balanced_shard(*buffers[i], buffer_seq_dims[i], rank, cp, i));
  }
  auto state = std::make_unique<ContextParallelScope::State>();
  for (size_t i = 0; i < buffers.size(); ++i) {
    state->buffers.push_back(buffers[i]);
    state->originals.push_back(std::exchange(*buffers[i], std::move(shards[i])));
    state->restore.push_back(std::find(no_restore_buffers.begin(), no_restore_buffers.end(),
                                       buffers[i]) == no_restore_buffers.end());
  }
  state->previous = parallel::set_context_group(&group);
  return ContextParallelScope(std::move(state));
}

}  // namespace accel
