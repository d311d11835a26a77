// prepare_pipeline and Pipeline::step: the model cut into stages and this process's prepared as
// prepare(model, plan) prepares a model (parallel::apply_* in the same order), the schedule run
// (parallel/pipeline_runner.h), then the stages' gradients synchronised over their data-parallel
// processes; and the whole model's tensors gathered from the stages for get_state_dict.

#include "accelerator_impl.h"

#include "checkpoint/checkpoint_checks.h"
#include "distributed/collectives.h"
#include "parallel/pipeline_cut.h"
#include "parallel/pipeline_runner.h"
#include "parallel/tensor_parallel.h"
#include "sharding/module_tensors.h"
#include "sharding/optimizer_resharding.h"
#include "util/collective_label.h"

#include <torch/nn/modules/container/sequential.h>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <utility>

namespace accel {

namespace detail {
struct PipelineState {
  Accelerator* accelerator = nullptr;
  std::unique_ptr<parallel::PipelineRunner> runner;
  /// The Sequential of this process's stages (the program's model after prepare_pipeline).
  torch::nn::Module* module = nullptr;
};
}  // namespace detail

namespace {

using parallel::PipelineSchedule;
using parallel::PipelineShape;

/// The children of a Sequential: their names, modules and parameter counts, in order.
struct Children {
  std::vector<std::string> names;
  std::vector<torch::nn::AnyModule> modules;
  std::vector<int64_t> parameters;
};
Children children_of(torch::nn::Sequential& model) {
  Children children;
  const auto named = model->named_children();
  size_t i = 0;
  for (const auto& any : *model) {
    children.names.push_back(named[i].key());
    children.modules.push_back(any);
    int64_t count = 0;
    for (const auto& p : named[i].value()->parameters()) count += p.numel();
    children.parameters.push_back(count);
    ++i;
  }
  return children;
}

/// The schedule and shape `options` ask for, refused (naming the value and the choices) before
/// anything changes.
std::pair<PipelineSchedule, PipelineShape> pipeline_layout(const PipelineOptions& options,
                                                           int64_t pp) {
  const auto schedule = parallel::parse_pipeline_schedule(options.schedule());
  TORCH_CHECK(schedule.has_value(), "accel: PipelineOptions::schedule '", options.schedule(),
              "' is not a schedule accel runs (schedules: ", parallel::pipeline_schedule_choices(),
              ")");
  PipelineShape shape;
  shape.processes = pp;
  shape.stages_per_process = options.stages_per_process();
  shape.microbatches =
      options.microbatches() == 0 ? pp * options.stages_per_process() : options.microbatches();
  const auto problem = parallel::pipeline_shape_problem(*schedule, shape);
  TORCH_CHECK(problem.empty(), "accel: prepare_pipeline: ", problem);
  return {*schedule, shape};
}

}  // namespace

std::vector<int64_t> Pipeline::stages() const {
  std::vector<int64_t> indices;
  for (const auto& stage : state_->runner->stages()) indices.push_back(stage.index);
  return indices;
}
int64_t Pipeline::num_stages() const { return state_->runner->shape().stages(); }
std::string Pipeline::schedule() const { return parallel::to_string(state_->runner->schedule()); }
int64_t Pipeline::microbatches() const { return state_->runner->shape().microbatches; }

torch::Tensor Pipeline::step(const torch::Tensor& inputs, const torch::Tensor& targets,
                             const PipelineLoss& loss_fn) {
  auto& accelerator = *state_->accelerator;
  auto& impl = *accelerator.impl_;
  parallel::PipelineStepCalls calls;
  calls.forward = [&accelerator](torch::nn::Sequential& stage, const torch::Tensor& x) {
    auto guard = accelerator.autocast();
    return stage->forward(x);
  };
  calls.loss = [&accelerator, &loss_fn](const torch::Tensor& output, const torch::Tensor& target) {
    auto guard = accelerator.autocast();
    return loss_fn(output, target);
  };
  // One pass over the batch: each microbatch's mean loss weighs 1/m, and 1/steps of the window.
  const double divisor =
      static_cast<double>(impl.window.loss_divisor(false) * state_->runner->shape().microbatches);
  calls.scale_loss = [&accelerator, divisor](const torch::Tensor& loss) {
    auto scaled = loss / divisor;
    if (auto* scaler = accelerator.scaler()) scaled = scaler->scale(scaled);
    return scaled;
  };
  auto mean = state_->runner->step(inputs, targets, calls);
  if (accelerator.sync_gradients()) impl.synchronise_gradients(*state_->module);
  return mean;
}

Pipeline Accelerator::prepare_pipeline(torch::nn::Sequential& model, const PipelineOptions& options,
                                       const TensorParallelPlan& plan) {
  ACCEL_METHOD_LABEL("prepare_pipeline");
  const auto* mesh = impl_->mesh;
  const auto& config = impl_->options.parallelism_config;
  const int64_t pp = config ? config->pp_size() : 1;
  const int64_t tp = mesh != nullptr ? mesh->config().tp_size() : 1;
  const int64_t rank = mesh != nullptr ? mesh->coordinate(distributed::MeshDim::pp) : 0;
  const auto [schedule, shape] = pipeline_layout(options, pp);
  auto children = children_of(model);
  auto starts = parallel::cut_stages(children.names, children.parameters, shape.stages(),
                                     options.split_before(),
                                     "pp_size " + std::to_string(pp) + " x stages_per_process " +
                                         std::to_string(shape.stages_per_process));
  starts.push_back(children.names.size());
  parallel::check_tensor_parallel_plan(*model, plan, tp);
  TORCH_CHECK(!sharding::has_sharded_parameters(*model),
              "accel: prepare_pipeline takes a model not prepared yet");

  impl_->place(*model);
  // Every process cuts rank 0's tensors, as prepare() gives every process rank 0's model.
  impl_->broadcast_model(*model);
  std::vector<std::string> whole_names;
  for (const auto& [name, tensor] : sharding::module_tensors(*model)) whole_names.push_back(name);

  // The Sequential of this process's stages' children, which the program keeps, prepared as a
  // model; then each stage, from its elements as prepared (activation checkpointing wraps them).
  torch::nn::Sequential held;
  for (int64_t k = 0; k < shape.stages_per_process; ++k) {
    const int64_t s = k * pp + rank;
    for (size_t c = starts[s]; c < starts[s + 1]; ++c) {
      held->push_back(children.names[c], children.modules[c]);
    }
  }
  model = held;
  const auto stage_plan = parallel::plan_for_part(*model, plan);
  impl_->prepare_parts(*model, &stage_plan, /*pipeline=*/true);
  impl_->pipelines[&*model] = std::move(whole_names);
  std::vector<parallel::PipelineStage> stages;
  auto element = held->begin();
  const auto names = held->named_children();
  size_t position = 0;
  for (int64_t k = 0; k < shape.stages_per_process; ++k) {
    const int64_t s = k * pp + rank;
    parallel::PipelineStage stage{s, torch::nn::Sequential()};
    for (size_t c = starts[s]; c < starts[s + 1]; ++c, ++element, ++position) {
      stage.module->push_back(names[position].key(), *element);
    }
    stages.push_back(std::move(stage));
  }

  auto state = std::make_shared<detail::PipelineState>();
  state->accelerator = this;
  state->runner = std::make_unique<parallel::PipelineRunner>(
      schedule, shape, rank, mesh != nullptr ? mesh->group(distributed::MeshGroup::pp) : nullptr,
      std::move(stages), impl_->device);
  state->module = &*model;
  return Pipeline(std::move(state));
}

void Accelerator::Impl::synchronise_gradients(torch::nn::Module& model) {
  if (!distributed()) return;
  util::CollectiveLabel label("pipeline gradients");
  auto& group = *gradient_group();
  if (all_reduces_gradients() && group.getSize() > 1) {
    // One flat all-reduce per dtype, as the reducer's buckets would carry them.
    std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
    for (const auto& p : model.parameters()) {
      if (p.grad().defined()) by_dtype[p.grad().scalar_type()].push_back(p.grad());
    }
    torch::NoGradGuard no_grad;
    for (auto& [dtype, grads] : by_dtype) {
      std::vector<torch::Tensor> flat_parts;
      for (const auto& g : grads) flat_parts.push_back(g.reshape(-1));
      auto flat = torch::cat(flat_parts);
      distributed::all_reduce(group, flat, Reduction::Sum);
      flat.div_(static_cast<double>(group.getSize()));
      int64_t offset = 0;
      for (auto& g : grads) {
        g.copy_(flat.narrow(0, offset, g.numel()).view_as(g));
        offset += g.numel();
      }
    }
  }
  // The sharded strategies take the whole gradients to their shards: ZeRO-2 and -3 reduce-
  // scatter them, ZeRO-1 cuts its slice out of the averaged ones.
  for (auto& shards : sharding.live()) shards->reduce_gradients();
}

NamedTensors Accelerator::Impl::gather_pipeline_tensors(const torch::nn::Module& module) {
  const auto& names = pipelines.at(&module);
  // One process of each stage gives its tensors whole (tensor-parallel slices and shards
  // gathered): the one at the mesh's origin but for its place along pp.
  bool gives = true;
  for (auto dim : {distributed::MeshDim::dp_replicate, distributed::MeshDim::dp_shard,
                   distributed::MeshDim::cp, distributed::MeshDim::tp}) {
    gives = gives && mesh->coordinate(dim) == 0;
  }
  auto tensors = sharding::has_sharded_parameters(module)
                     ? sharding::module_tensors_to_save(module, gives)
                     : sharding::module_tensors(module);
  c10::Dict<std::string, torch::Tensor> mine;
  if (gives) {
    for (const auto& [name, tensor] : tensors) mine.insert(name, tensor.detach().cpu());
  }
  std::map<std::string, torch::Tensor> gathered;
  for (const auto& value : distributed::all_gather_ivalues(host_group(), mine)) {
    for (const auto& entry : value.toGenericDict()) {
      gathered[entry.key().toStringRef()] = entry.value().toTensor();
    }
  }
  NamedTensors whole;
  for (const auto& name : names) {
    const auto found = gathered.find(name);
    TORCH_CHECK(found != gathered.end(), "accel: get_state_dict of a pipeline: no stage holds '",
                name, "'");
    whole.emplace_back(name, found->second.to(device));
  }
  return whole;
}

namespace {

/// Where each parameter of a pipeline's stages is in the whole model's order (its tensors' order:
/// parameters first).
std::map<const c10::TensorImpl*, int64_t> whole_positions(
    const std::map<const torch::nn::Module*, std::vector<std::string>>& pipelines) {
  std::map<const c10::TensorImpl*, int64_t> positions;
  for (const auto& [module, names] : pipelines) {
    std::map<std::string, int64_t> place;
    for (size_t i = 0; i < names.size(); ++i) place.emplace(names[i], static_cast<int64_t>(i));
    for (const auto& item : module->named_parameters()) {
      const auto found = place.find(item.key());
      if (found != place.end()) positions[item.value().unsafeGetTensorImpl()] = found->second;
    }
  }
  return positions;
}

}  // namespace

checkpoints::CheckpointInputs::Pipeline Accelerator::Impl::pipeline_checkpoint() {
  util::CollectiveLabel label("pipeline checkpoint layout");
  checkpoints::CheckpointInputs::Pipeline pipeline;
  for (const auto& [module, names] : pipelines) pipeline.stage_models.push_back(module);
  pipeline.whole_tensors = [this](const torch::nn::Module& module) {
    return gather_pipeline_tensors(module);
  };
  // Each optimizer group's parameters, by their place in the whole model: every process's list,
  // gathered, gives each its place in the group one process would have.
  const auto positions = whole_positions(pipelines);
  const auto live = sharding.live();
  c10::impl::GenericList mine(c10::AnyType::get());
  for (auto* gate : loop->optimizers.gates()) {
    detail::OpenedGate open(*gate);
    c10::impl::GenericList groups(c10::AnyType::get());
    for (const auto& group : sharding::built_parameters(*gate->optimizer(), live)) {
      std::vector<int64_t> places;
      for (const auto& p : group) {
        const auto found = positions.find(p.unsafeGetTensorImpl());
        TORCH_CHECK(found != positions.end(),
                    "accel: save_state/load_state of a pipeline: an optimizer trains a "
                    "parameter (shape ",
                    p.sizes(), ") that no stage of the pipeline holds");
        places.push_back(found->second);
      }
      groups.push_back(c10::IValue(places));
    }
    mine.push_back(c10::IValue(groups));
  }
  const auto everyone = distributed::all_gather_ivalues(host_group(), c10::IValue(mine));
  for (size_t i = 0; i < loop->optimizers.gates().size(); ++i) {
    std::vector<std::vector<int64_t>> whole, local;
    for (size_t r = 0; r < everyone.size(); ++r) {
      const auto groups = everyone[r].toList().get(i).toList();
      whole.resize(groups.size());
      for (size_t g = 0; g < groups.size(); ++g) {
        const auto places = groups.get(g).toIntVector();
        whole[g].insert(whole[g].end(), places.begin(), places.end());
        if (static_cast<int64_t>(r) == dist->rank()) local.push_back(places);
      }
    }
    for (auto& group : whole) {
      std::sort(group.begin(), group.end());
      group.erase(std::unique(group.begin(), group.end()), group.end());
    }
    pipeline.global_indices.push_back([whole, local](size_t g, int64_t k) {
      const auto& group = whole.at(g);
      return static_cast<int64_t>(
          std::lower_bound(group.begin(), group.end(), local.at(g).at(static_cast<size_t>(k))) -
          group.begin());
    });
  }
  pipeline.optimizer_layouts = merged_optimizer_layouts(pipeline.global_indices);
  return pipeline;
}

nlohmann::json Accelerator::Impl::merged_optimizer_layouts(
    const std::vector<sharding::GlobalIndex>& global_indices) {
  const auto described = checkpoints::describe_optimizers(
      loop->optimizers, sharding.live(), mesh->config().tp_size(), &global_indices);
  return checkpoints::merge_stage_descriptions(
      distributed::all_gather_bytes(host_group(), described.dump()), mesh->config().pp_size());
}

}  // namespace accel
