// A pipeline step on one process: see pipeline_runner.h.

#include "pipeline_runner.h"

#include "ring_exchange.h"

#include "distributed/collectives.h"
#include "util/collective_label.h"

#include <torch/autograd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <utility>

namespace accel {
namespace parallel {

namespace {

/// What travels between two stages, and its tag: one per (kind, receiving stage, microbatch),
/// so that a receive takes its own message whatever order the sends arrive in.
enum class Message { shape = 0, activation = 1, gradient = 2 };
int tag_of(Message kind, int64_t stage, int64_t microbatch, int64_t stages) {
  return static_cast<int>((microbatch * stages + stage) * 3 + static_cast<int64_t>(kind));
}

/// An activation's dtype and sizes, sent before it (a stage's output shape is its own).
constexpr int64_t kMaxDims = 8;
torch::Tensor shape_message(const torch::Tensor& tensor) {
  TORCH_CHECK(tensor.dim() <= kMaxDims, "accel: a pipeline stage's output has ", tensor.dim(),
              " dimensions; at most ", kMaxDims, " travel between stages");
  auto message = torch::zeros({kMaxDims + 2}, torch::kInt64);
  message[0] = static_cast<int64_t>(tensor.scalar_type());
  message[1] = tensor.dim();
  for (int64_t d = 0; d < tensor.dim(); ++d) message[d + 2] = tensor.size(d);
  return message;
}

}  // namespace

struct PipelineRunner::Microbatch {
  torch::Tensor input;   // a stage after the first: the received activation, a leaf
  torch::Tensor output;  // a stage before the last: what went to the next stage
  torch::Tensor loss;    // the last stage: this microbatch's loss
};

/// The sends and receives of one step on the pp group. Sends are asynchronous; a receive waits.
/// Every process runs its schedule in order, so a receive waits only for a send its peer's
/// schedule puts before the peer's own next receive: no cycle.
///
/// A send holds its tensor (the activation or gradient it views) until it has gone, which c10d's
/// Gloo sends report only when waited on. So each is waited on where the schedule proves it
/// received, which returns at once: an activation's when the gradient of its microbatch comes
/// back, a gradient's when the previous stage's next activation arrives (see release_points);
/// the rest at the step's end. A stage then holds no more than the schedule keeps for backward.
///
/// On NCCL a send holds up the stream it runs on until its peer receives, and the two
/// directions between a pair share one: two stages each sending before receiving from the other
/// (1F1B's steady state) would each wait for the other. There the sends are held back and issued
/// with the next receive in one coalesced group (torch's batch_isend_irecv), whose operations
/// proceed together.
class PipelineRunner::Link {
 public:
  Link(c10d::ProcessGroup* group, const torch::Device& device)
      : group_(group),
        device_(device),
        batched_(group != nullptr && groups_point_to_point(*group, device.type())) {}
  ~Link() {
    try {
      finish();
    } catch (...) {  // the error that ended the step is the one to report
    }
  }

  void send(const torch::Tensor& tensor, int64_t to, int tag, bool with_shape) {
    if (with_shape) send_one(shape_message(tensor).to(device_), to, tag - 1);
    send_one(tensor.contiguous(), to, tag);
  }

  /// An activation. Its dtype and sizes come before a stage's first microbatch of a step (a
  /// stage's output is shaped alike for each of the step's equal microbatches) and are kept in
  /// `shape` for the others: one message fewer per hop.
  torch::Tensor receive_activation(int64_t from, int tag, bool with_shape, torch::Tensor& shape) {
    if (with_shape) {
      shape = receive_one(torch::empty({kMaxDims + 2}, torch::kInt64), from, tag - 1).cpu();
    }
    TORCH_CHECK(shape.defined(),
                "accel: a pipeline stage received microbatch activations "
                "before its first (every schedule runs microbatch 0 first)");
    const auto dtype = static_cast<c10::ScalarType>(shape[0].item<int64_t>());
    std::vector<int64_t> sizes(shape[1].item<int64_t>());
    for (size_t d = 0; d < sizes.size(); ++d) sizes[d] = shape[d + 2].item<int64_t>();
    return receive_one(torch::empty(sizes, torch::dtype(dtype)), from, tag);
  }
  /// A gradient, shaped as the activation it is the gradient of.
  torch::Tensor receive_like(const torch::Tensor& like, int64_t from, int tag) {
    return receive_one(torch::empty(like.sizes(), like.options()), from, tag);
  }

  /// The sends of `tag` (and its shape message), known to have been received.
  void release(int tag) {
    for (int t : {tag - 1, tag}) {
      const auto found = pending_.find(t);
      if (found == pending_.end()) continue;
      if (found->second.second) found->second.second->wait();
      pending_.erase(found);
    }
  }

  void finish() {
    issue_held({});
    for (auto& [tag, sent] : pending_) {
      if (sent.second) sent.second->wait();
    }
    pending_.clear();
  }

 private:
  struct Held {
    torch::Tensor tensor;
    int64_t to;
    int tag;
  };
  struct Receive {
    std::vector<torch::Tensor>* tensors = nullptr;
    int64_t from = 0;
    int tag = 0;
  };

  void send_one(const torch::Tensor& tensor, int64_t to, int tag) {
    if (batched_) {
      held_.push_back({tensor, to, tag});
      return;
    }
    util::CollectiveLabel label("to process", to);
    std::vector<torch::Tensor> tensors{tensor};
    pending_[tag] = {tensor, group_->send(tensors, static_cast<int>(to), tag)};
  }
  torch::Tensor receive_one(torch::Tensor buffer, int64_t from, int tag) {
    std::vector<torch::Tensor> tensors{buffer.to(device_)};
    if (batched_) {
      issue_held(Receive{&tensors, from, tag})->wait();
      return tensors[0];
    }
    util::CollectiveLabel label("from process", from);
    group_->recv(tensors, static_cast<int>(from), tag)->wait();
    return tensors[0];
  }

  /// NCCL: the held sends and `receive` (if any) in one coalesced group; returns its work, which
  /// the sends' entries keep until released.
  c10::intrusive_ptr<c10d::Work> issue_held(const Receive& receive) {
    if (!batched_ || (held_.empty() && receive.tensors == nullptr)) return {};
    group_->startCoalescing(device_.type());
    for (auto& sent : held_) {
      util::CollectiveLabel label("to process", sent.to);
      std::vector<torch::Tensor> tensors{sent.tensor};
      group_->send(tensors, static_cast<int>(sent.to), sent.tag);
    }
    if (receive.tensors != nullptr) {
      util::CollectiveLabel label("from process", receive.from);
      group_->recv(*receive.tensors, static_cast<int>(receive.from), receive.tag);
    }
    auto work = group_->endCoalescing(device_.type());
    for (auto& sent : held_) pending_[sent.tag] = {sent.tensor, work};
    held_.clear();
    return work;
  }

  c10d::ProcessGroup* group_;
  torch::Device device_;
  bool batched_;
  std::vector<Held> held_;  // NCCL: sends waiting for the next receive
  std::map<int, std::pair<torch::Tensor, c10::intrusive_ptr<c10d::Work>>> pending_;
};

PipelineRunner::PipelineRunner(PipelineSchedule schedule, PipelineShape shape, int64_t rank,
                               c10::intrusive_ptr<c10d::ProcessGroup> group,
                               std::vector<PipelineStage> stages, torch::Device device)
    : schedule_(schedule),
      shape_(shape),
      rank_(rank),
      group_(std::move(group)),
      stages_(std::move(stages)),
      actions_(pipeline_actions(schedule, shape, rank)),
      device_(device) {
  release_points();
}

void PipelineRunner::release_points() {
  // A gradient this process sends to stage s − 1 for microbatch j has been received once that
  // stage's process has run B(s − 1, j): proven here when an activation arrives that it sent
  // after that backward (its next forward of stage s − 1 in its schedule).
  const int64_t pp = shape_.processes, m = shape_.microbatches;
  for (const auto& stage : stages_) {
    const int64_t s = stage.index;
    if (s == 0 || on_here(s - 1)) continue;
    const auto previous = pipeline_actions(schedule_, shape_, stage_process(s - 1, pp));
    for (int64_t j = 0; j < m; ++j) {
      auto at = std::find(previous.begin(), previous.end(), PipelineAction{false, s - 1, j});
      auto next = std::find_if(at, previous.end(), [&](const PipelineAction& a) {
        return a.forward && a.stage == s - 1;
      });
      if (next == previous.end()) continue;  // waited on at the step's end
      gradient_releases_[{s, next->microbatch}].push_back(j);
    }
  }
}

PipelineStage& PipelineRunner::local_stage(int64_t index) {
  for (auto& stage : stages_) {
    if (stage.index == index) return stage;
  }
  TORCH_CHECK(false, "accel: pipeline stage ", index, " is not on process ", rank_);
}

/// What one step's actions share: the microbatches' inputs and targets, the tensors kept from a
/// forward for its backward, what passes between two stages on this process (interleaved
/// schedules, or every stage on one process), the sends, and the last stage's losses.
struct PipelineRunner::StepState {
  StepState(c10d::ProcessGroup* group, const torch::Device& device) : link(group, device) {}
  std::vector<torch::Tensor> inputs, targets;
  std::map<std::pair<int64_t, int64_t>, Microbatch> live;
  std::map<std::pair<int64_t, int64_t>, torch::Tensor> handed_activations, handed_gradients;
  std::map<int64_t, torch::Tensor> shapes;  // each receiving stage's activation shape
  Link link;
  torch::Tensor loss_sum;
};

namespace {

torch::Tensor take(std::map<std::pair<int64_t, int64_t>, torch::Tensor>& handed, int64_t stage,
                   int64_t microbatch) {
  auto value = std::move(handed.at({stage, microbatch}));
  handed.erase({stage, microbatch});
  return value;
}

}  // namespace

void PipelineRunner::run_forward(const PipelineAction& action, StepState& step,
                                 const PipelineStepCalls& calls) {
  const int64_t s = action.stage, j = action.microbatch, stages = shape_.stages();
  const int64_t pp = shape_.processes;
  util::CollectiveLabel kind_label("activation");
  Microbatch micro;
  torch::Tensor x;
  if (s == 0) {
    x = step.inputs[j].to(device_);
  } else if (on_here(s - 1)) {
    x = take(step.handed_activations, s, j);
  } else {
    x = step.link.receive_activation(stage_process(s - 1, pp),
                                     tag_of(Message::activation, s, j, stages),
                                     /*with_shape=*/j == 0, step.shapes[s]);
    const auto released = gradient_releases_.find({s, j});
    if (released != gradient_releases_.end()) {
      for (int64_t k : released->second) {
        step.link.release(tag_of(Message::gradient, s - 1, k, stages));
      }
    }
  }
  if (s > 0 && x.is_floating_point()) {
    // A leaf, whose gradient goes back to the previous stage.
    x = x.detach().requires_grad_(true);
    micro.input = x;
  }
  auto y = calls.forward(local_stage(s).module, x);
  if (s == stages - 1) {
    micro.loss = calls.loss(y, step.targets[j].to(device_));
    step.loss_sum =
        step.loss_sum.defined() ? step.loss_sum + micro.loss.detach() : micro.loss.detach();
  } else {
    micro.output = y;
    if (on_here(s + 1)) {
      step.handed_activations[{s + 1, j}] = y.detach();
    } else {
      step.link.send(y.detach(), stage_process(s + 1, pp),
                     tag_of(Message::activation, s + 1, j, stages), /*with_shape=*/j == 0);
    }
  }
  step.live[{s, j}] = std::move(micro);
}

void PipelineRunner::run_backward(const PipelineAction& action, StepState& step,
                                  const PipelineStepCalls& calls) {
  const int64_t s = action.stage, j = action.microbatch, stages = shape_.stages();
  const int64_t pp = shape_.processes;
  util::CollectiveLabel kind_label("gradient");
  auto micro = std::move(step.live.at({s, j}));
  step.live.erase({s, j});
  if (s == stages - 1) {
    torch::autograd::backward({calls.scale_loss(micro.loss)});
  } else if (micro.output.is_floating_point()) {
    // A floating activation always has a gradient coming back (its receiver made it a leaf).
    auto grad = on_here(s + 1) ? take(step.handed_gradients, s, j)
                               : step.link.receive_like(micro.output, stage_process(s + 1, pp),
                                                        tag_of(Message::gradient, s, j, stages));
    // Its gradient back: the next stage has received this microbatch's activation.
    if (!on_here(s + 1)) step.link.release(tag_of(Message::activation, s + 1, j, stages));
    if (micro.output.requires_grad()) torch::autograd::backward({micro.output}, {grad});
  }
  if (!micro.input.defined()) return;
  // An input the stage did not use has no gradient: zeros keep the previous stage's receive
  // matched.
  auto grad = micro.input.grad().defined() ? micro.input.grad() : torch::zeros_like(micro.input);
  if (on_here(s - 1)) {
    step.handed_gradients[{s - 1, j}] = grad;
  } else {
    step.link.send(grad, stage_process(s - 1, pp), tag_of(Message::gradient, s - 1, j, stages),
                   /*with_shape=*/false);
  }
}

torch::Tensor PipelineRunner::step(const torch::Tensor& inputs, const torch::Tensor& targets,
                                   const PipelineStepCalls& calls) {
  const int64_t m = shape_.microbatches, stages = shape_.stages(), pp = shape_.processes;
  util::CollectiveLabel step_label("Pipeline::step");
  for (const auto* batch : {&inputs, &targets}) {
    TORCH_CHECK(batch->dim() > 0 && batch->size(0) % m == 0, "accel: Pipeline::step cuts the ",
                batch == &inputs ? "inputs" : "targets", "' batch of ",
                batch->dim() > 0 ? batch->size(0) : 0, " into ", m,
                " microbatches, which does not divide it; make the batch a multiple of ", m,
                " or choose PipelineOptions().microbatches(n) for an n that divides it");
  }
  StepState step(group_.get(), device_);
  step.inputs = inputs.chunk(m);
  step.targets = targets.chunk(m);
  for (const auto& action : actions_) {
    util::CollectiveLabel stage_label("stage", action.stage);
    util::CollectiveLabel microbatch_label("microbatch", action.microbatch);
    if (action.forward) {
      run_forward(action, step, calls);
    } else {
      run_backward(action, step, calls);
    }
  }
  step.link.finish();
  // The last stage's mean loss, on every process of the pipeline.
  const int64_t last = stage_process(stages - 1, pp);
  torch::Tensor mean = rank_ == last
                           ? (step.loss_sum / static_cast<double>(m)).to(torch::kFloat)
                           : torch::zeros({}, torch::dtype(torch::kFloat).device(device_));
  if (group_ && pp > 1) {
    util::CollectiveLabel label("loss");
    distributed::broadcast(*group_, mean, last);
  }
  return mean;
}

}  // namespace parallel
}  // namespace accel
