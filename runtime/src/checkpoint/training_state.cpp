#include "training_state.h"

#include "checkpoint_checks.h"
#include "checkpoint_files.h"
#include "checkpoint_folders.h"
#include "random_states.h"
#include "sharding/module_tensors.h"
#include "sharding/optimizer_resharding.h"
#include "state_layout.h"
#include "util/collective_label.h"
#include "util/durable_file.h"
#include "window_gradients.h"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>

namespace accel::checkpoints {

namespace fs = std::filesystem;

namespace {

/// The entry of a window's gradient file that holds backward(loss_sum, num_items)'s count.
constexpr const char* kWindowItems = "accel.window_items";
constexpr int kFormatVersion = 1;

/// The optimizers of the live gates, as window_gradients takes them (the gates must be open).
std::vector<torch::optim::Optimizer*> gated_optimizers(const optim::OptimizerRegistry& registry) {
  std::vector<torch::optim::Optimizer*> optimizers;
  for (auto* gate : registry.gates()) optimizers.push_back(gate->optimizer());
  return optimizers;
}

/// The SHARDED_STATE_DICT layout of the models, when the run writes them so.
std::optional<ShardedModels> sharded_models_of(const CheckpointInputs& run) {
  if (!run.sharded_state_dict) return std::nullopt;
  const auto& cut = *run.sharded_state_dict;
  return ShardedModels{run.shards, cut.rank, cut.processes, cut.writes};
}

/// Each process writes its own optimizer state: a shard of it, or a tensor-parallel part's.
bool per_process_optimizers(const CheckpointInputs& run) {
  return run.sharded_optimizers || run.mesh.tp > 1 || run.pipeline.has_value();
}

/// The save's and the load's table of parts (models written as `layout` says).
std::vector<Part> parts_of(const CheckpointInputs& run,
                           const std::vector<torch::nn::Module*>& models,
                           const ModelsLayout& layout,
                           std::function<void(torch::optim::Optimizer&)> on_optimizer_loaded) {
  return checkpoint_parts(models, layout, *run.optimizers, *run.stateful, *run.custom_objects,
                          std::move(on_optimizer_loaded), per_process_optimizers(run));
}

/// The models' whole tensors for the coordinator to write: FULL_SHARD models' are gathered by
/// every process (a collective), the others' read by the coordinator only.
std::vector<NamedTensors> whole_models(const CheckpointInputs& run,
                                       const std::vector<torch::nn::Module*>& models,
                                       bool coordinator) {
  std::vector<NamedTensors> gathered(models.size());
  for (size_t i = 0; i < models.size(); ++i) {
    const auto& module = *models[i];
    const auto& stages =
        run.pipeline ? run.pipeline->stage_models : std::vector<const torch::nn::Module*>{};
    if (std::find(stages.begin(), stages.end(), &module) != stages.end()) {
      // Every stage's tensors, gathered from their processes.
      gathered[i] = run.pipeline->whole_tensors(module);
    } else if (sharding::has_sharded_parameters(module)) {
      gathered[i] = sharding::module_tensors_to_save(module, coordinator);
    } else if (coordinator) {
      gathered[i] = sharding::module_tensors(module);
    }
  }
  return gathered;
}

// ---- save_state ---------------------------------------------------------------------------

/// Writes every part: the coordinator the shared files, every process its own.
void write_parts(const CheckpointInputs& run, const std::vector<Part>& parts,
                 const fs::path& staging, bool coordinator) {
  if (coordinator) {
    for (const auto& part : parts) {
      if (part.per_process) continue;
      for (size_t i = 0; i < part.count; ++i) part.save(staging / part.file(i), i);
    }
  }
  TORCH_CHECK(fs::is_directory(staging), "accel: save_state: ", staging.string(),
              " does not exist where process ", run.process_index,
              " runs; machines that do not share a filesystem need "
              "project_configuration().save_on_each_node(true)");
  for (const auto& part : parts) {
    if (!part.per_process || !part.writes) continue;
    for (size_t i = 0; i < part.count; ++i) {
      part.save(staging / per_process_file(part.file(i), part.file_rank_of(run.process_index)), i);
    }
  }
  save_generators(staging / random_states_file(run.process_index));
}

/// Inside an accumulation window, what it has accumulated so far: each process its own.
void write_window(const CheckpointInputs& run, const fs::path& staging) {
  optim::AllGatesOpen open(*run.optimizers);
  auto accumulated = checkpoints::window_gradients(run.models, gated_optimizers(*run.optimizers));
  // backward(loss_sum, num_items): the items this process counted in the window so far.
  const auto& items = run.window.items;
  if (items.open && items.counts_items) {
    accumulated.emplace_back(kWindowItems, torch::tensor({items.items}, torch::kInt64));
  }
  save_safetensors((staging / checkpoints::window_gradients_file(run.process_index)).string(),
                   accumulated);
}

/// accel_state.json: how the checkpoint was cut, and how many of each part it holds.
nlohmann::json summary_of(const CheckpointInputs& run, const std::vector<Part>& parts,
                          bool in_window) {
  nlohmann::json summary = {
      {"format", kFormatVersion},
      {"num_processes", run.num_processes},
      {"step", run.window.step},
      {"iteration", run.project->iteration()},
      {"sharding_strategy", to_string(run.sharding_strategy)},
      {checkpoint_folder::key::kStateDictType,
       to_string(run.sharded_state_dict ? StateDictType::ShardedStateDict
                                        : StateDictType::FullStateDict)},
      {"gradient_accumulation_steps", run.gradient_accumulation_steps},
      {"micro_step", run.window.micro_step},
      {"window_gradients", in_window},
      {"optimizer_layout",
       run.pipeline ? run.pipeline->optimizer_layouts
                    : checkpoints::describe_optimizers(*run.optimizers, run.shards, run.mesh.tp)}};
  if (run.mesh.configured) {
    const auto& mesh = run.mesh;
    summary["parallelism"] = {{"dp_replicate_size", mesh.dp_replicate},
                              {"dp_shard_size", mesh.dp_shard},
                              {"cp_size", mesh.cp},
                              {"tp_size", mesh.tp}};
    // Written only for a pipeline, so a checkpoint without one reads as before.
    if (mesh.pp > 1) summary["parallelism"]["pp_size"] = mesh.pp;
  }
  for (const auto& part : parts) {
    if (part.flag) {
      summary[part.key] = part.count > 0;
    } else {
      summary[part.key] = part.count;
    }
  }
  return summary;
}

// ---- load_state ---------------------------------------------------------------------------

/// A checkpoint's accel_state.json.
struct Summary {
  fs::path path;
  nlohmann::json json;

  int64_t integer(const char* key) const {
    TORCH_CHECK(json.contains(key) && json[key].is_number_integer(), "accel: ", path.string(),
                " has no integer '", key, "'");
    return json[key].get<int64_t>();
  }
};

Summary read_summary(const fs::path& dir) {
  Summary summary{dir / kStateFile, {}};
  TORCH_CHECK(fs::is_regular_file(summary.path), "accel: ", dir.string(),
              " is not a complete checkpoint (it has no ", kStateFile, ")");
  try {
    summary.json = nlohmann::json::parse(util::read_file(summary.path.string()));
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "accel: ", summary.path.string(), " is not valid JSON: ", e.what());
  }
  TORCH_CHECK(summary.integer("format") == kFormatVersion, "accel: ", summary.path.string(),
              " has format ", summary.integer("format"), "; this libaccel reads format ",
              kFormatVersion);
  return summary;
}

/// How the checkpoint holds its models (FULL_STATE_DICT when it does not say: older ones).
StateDictType saved_state_dict_type(const Summary& summary) {
  const std::string type =
      summary.json.value(checkpoint_folder::key::kStateDictType, "FULL_STATE_DICT");
  const auto parsed = parse_state_dict_type(type);
  TORCH_CHECK(parsed.has_value(), "accel: ", summary.path.string(), " names state_dict_type '",
              type, "', which this libaccel does not know");
  return *parsed;
}

/// How a checkpoint was cut, from its summary: by how many processes, under which strategy, and
/// its optimizers' layouts.
struct SavedLayout {
  int64_t processes = 1;
  ShardingStrategy strategy = ShardingStrategy::NoShard;
  nlohmann::json optimizers;
  /// The layouts are recorded: optimizer state saved in shards is re-split on load (a checkpoint
  /// from before they were recorded is not).
  bool layouts_saved = false;
  bool window = false;
  /// The device mesh it was saved on (not `configured`: none).
  CheckpointInputs::Mesh mesh;
};

/// The "parallelism" entry of a summary: the mesh's sizes.
CheckpointInputs::Mesh read_saved_mesh(const Summary& summary) {
  CheckpointInputs::Mesh mesh;
  const auto found = summary.json.find("parallelism");
  if (found == summary.json.end()) return mesh;
  auto size = [&](const char* key) {
    const auto value = found->find(key);
    TORCH_CHECK(found->is_object() && value != found->end() && value->is_number_integer() &&
                    value->get<int64_t>() >= 1,
                "accel: ", summary.path.string(), "'s 'parallelism' has no size '", key, "'");
    return value->get<int64_t>();
  };
  mesh.dp_replicate = size("dp_replicate_size");
  mesh.dp_shard = size("dp_shard_size");
  mesh.cp = size("cp_size");
  mesh.tp = size("tp_size");
  mesh.pp = found->contains("pp_size") ? size("pp_size") : 1;
  mesh.configured = true;
  return mesh;
}

std::string describe(const CheckpointInputs::Mesh& mesh) {
  if (!mesh.configured) return "no device mesh";
  return "a mesh of " + (mesh.pp > 1 ? "pp " + std::to_string(mesh.pp) + " x " : std::string()) +
         "dp_replicate " + std::to_string(mesh.dp_replicate) + " x dp_shard " +
         std::to_string(mesh.dp_shard) + " x cp " + std::to_string(mesh.cp) + " x tp " +
         std::to_string(mesh.tp);
}

SavedLayout read_saved_layout(const Summary& summary) {
  SavedLayout saved;
  saved.processes = summary.integer("num_processes");
  const std::string strategy = summary.json.value("sharding_strategy", "NO_SHARD");
  const auto parsed = parse_sharding_strategy(strategy);
  TORCH_CHECK(parsed.has_value(), "accel: ", summary.path.string(), " names sharding_strategy '",
              strategy, "', which this libaccel does not know");
  saved.strategy = *parsed;
  saved.optimizers = summary.json.value("optimizer_layout", nlohmann::json());
  saved.layouts_saved = saved.optimizers.is_array() && !saved.optimizers.empty() &&
                        saved.optimizers[0].contains("layout");
  saved.window = summary.json.value("window_gradients", false);
  saved.mesh = read_saved_mesh(summary);
  return saved;
}

/// A checkpoint from another process count loads only when `options` allow it, or when the run
/// or the checkpoint has a device mesh (moving between layouts is what a mesh is for); optimizer
/// state laid out by another strategy, or sharded over another process count, only when its
/// layouts were recorded (to re-split it). A window's gradients are each process's own slices:
/// they resume on the mesh that took them.
void check_layout_fits(const fs::path& dir, const SavedLayout& saved,
                       const LoadStateOptions& options, const CheckpointInputs& run) {
  TORCH_CHECK(!saved.window || saved.mesh == run.mesh, "accel: ", dir.string(),
              " was taken inside a gradient accumulation window on ", describe(saved.mesh),
              " and this run has ", describe(run.mesh),
              "; a window's gradients are each process's own: resume it on the same mesh, or "
              "from a checkpoint taken on a synchronising step");
  const bool any_mesh = saved.mesh.configured || run.mesh.configured;
  TORCH_CHECK(
      saved.processes == run.num_processes || options.allow_process_count_change() || any_mesh,
      "accel: ", dir.string(), " was saved by ", saved.processes, " processes and this job has ",
      run.num_processes,
      "; random generators and data-loader positions are per process, so resume with the "
      "same number of processes, or pass "
      "accel::LoadStateOptions().allow_process_count_change(true)");
  const bool has_optimizers = !run.optimizers->gates().empty();
  TORCH_CHECK(saved.layouts_saved || !has_optimizers || saved.strategy == run.sharding_strategy,
              "accel: ", dir.string(), " was saved with sharding_strategy ", saved.strategy,
              " and this run uses ", run.sharding_strategy,
              "; the optimizer state is laid out by the strategy, so resume with the same one");
  TORCH_CHECK(
      saved.layouts_saved || !run.sharded_optimizers || saved.processes == run.num_processes,
      "accel: ", dir.string(), " holds optimizer state sharded over ", saved.processes,
      " processes and this job has ", run.num_processes,
      "; sharded optimizer state resumes on the same number of processes");
}

/// The checkpoint holds as many of each part as this program prepared (a flag part: one if used).
void check_part_counts(const std::vector<Part>& parts, const Summary& summary,
                       const fs::path& dir) {
  for (const auto& part : parts) {
    if (part.flag) {
      const bool saved = summary.json.value(part.key, false);
      TORCH_CHECK(saved == (part.count > 0), "accel: ", dir.string(), saved ? " has " : " has no ",
                  part.what, " and this run ", saved ? "does not use " : "uses ", part.used_with);
    } else {
      TORCH_CHECK(summary.integer(part.key) == static_cast<int64_t>(part.count),
                  "accel: ", dir.string(), " holds ", summary.integer(part.key), " ", part.what,
                  " and this program prepared ", part.count,
                  "; prepare the same objects in the same order as the saved run");
    }
  }
}

/// An optimizer to re-split on load, and the saved files its state comes from.
struct Resplit {
  sharding::ResplitPlan plan;
  bool per_process = false;
  std::string where;  // for errors
  std::vector<std::string> files;
};

/// The re-split of each optimizer (none: it reads its own file as saved).
std::vector<std::optional<Resplit>> plan_resplits(const CheckpointInputs& run,
                                                  const SavedLayout& saved, const fs::path& dir,
                                                  const std::string& state_path) {
  const auto& gates = run.optimizers->gates();
  std::vector<std::optional<Resplit>> plans(gates.size());
  if (!saved.layouts_saved) return plans;
  for (size_t i = 0; i < plans.size(); ++i) {
    detail::OpenedGate open(*gates[i]);
    const std::string where = (dir / numbered("optimizer", i, ".pt")).string();
    auto plan = sharding::plan_resplit(
        *gates[i]->optimizer(), run.shards, {run.mesh.tp, run.tp_rank},
        saved.optimizers.at(i).at("layout"), saved.processes == run.num_processes, state_path,
        where, run.pipeline ? run.pipeline->global_indices.at(i) : nullptr, run.mesh.pp);
    if (!plan) continue;
    // Sharded, tensor-parallel or pipelined state is in each process's file, else in the main
    // one's.
    const bool per_process =
        saved.strategy != ShardingStrategy::NoShard || plan->saved.tp > 1 || plan->saved.pp > 1;
    Resplit resplit{std::move(*plan), per_process, where, {}};
    for (const int64_t process : resplit.plan.files) {
      resplit.files.push_back(optimizer_slice_file(i, process, per_process));
    }
    plans[i] = std::move(resplit);
  }
  return plans;
}

/// The re-split of a part's i-th object, if it has one.
const Resplit* resplit_of(const Part& part, size_t i,
                          const std::vector<std::optional<Resplit>>& resplits) {
  return part.resplits && resplits[i] ? &*resplits[i] : nullptr;
}

/// Every file process `rank` will read is there, or the error names all that are not.
void check_files_present(const fs::path& dir, const std::vector<Part>& parts,
                         const std::vector<std::optional<Resplit>>& resplits, int64_t rank,
                         const SavedLayout& saved) {
  std::vector<std::string> missing;
  auto expect = [&](const std::string& file) {
    if (!fs::is_regular_file(dir / file)) missing.push_back(file);
  };
  for (const auto& part : parts) {
    for (size_t i = 0; i < part.count; ++i) {
      if (const auto* resplit = resplit_of(part, i, resplits)) {
        for (const auto& file : resplit->files) expect(file);
      } else if (part.per_process) {
        expect(per_process_file(part.file(i), part.file_rank_of(rank)));
      }
    }
  }
  if (rank < saved.processes) expect(random_states_file(rank));
  if (saved.window) expect(checkpoints::window_gradients_file(rank));
  TORCH_CHECK(missing.empty(), "accel: ", dir.string(), " is missing process ", rank,
              "'s files: ", c10::Join(", ", missing));
}

/// Everything load_state checks before anything is loaded: a checkpoint that does not fit leaves
/// the run as it was. Returns the optimizers' re-split plans.
std::vector<std::optional<Resplit>> check_before_loading(
    const CheckpointInputs& run, const fs::path& dir, const Summary& summary,
    const SavedLayout& saved, const std::vector<Part>& parts, const LoadStateOptions& options) {
  check_part_counts(parts, summary, dir);
  const bool same_processes = saved.processes == run.num_processes;
  checkpoints::check_accumulation(summary.json, summary.path.string(), saved.processes,
                                  saved.window, options, run.num_processes,
                                  run.gradient_accumulation_steps);
  // A pipeline's stages hold some of each group's parameters: the re-split checks them each.
  const bool pipelined = run.pipeline.has_value() || saved.mesh.pp > 1;
  checkpoints::check_optimizers(
      saved.optimizers, checkpoints::describe_optimizers(*run.optimizers, run.shards, run.mesh.tp),
      summary.path.string(), [](size_t i) { return numbered("optimizer", i, ".pt"); },
      same_processes && saved.strategy == run.sharding_strategy && !pipelined);
  for (const auto& part : parts) {
    for (size_t i = 0; i < part.count && part.check && !part.per_process; ++i) {
      part.check(dir / part.file(i), i);
    }
  }
  auto resplits = plan_resplits(run, saved, dir, summary.path.string());
  check_files_present(dir, parts, resplits, run.process_index, saved);
  return resplits;
}

/// Loads every part; an optimizer with a re-split plan is assembled from the saved slices.
void load_parts(const CheckpointInputs& run, const fs::path& dir, const std::vector<Part>& parts,
                const std::vector<std::optional<Resplit>>& resplits) {
  const auto& gates = run.optimizers->gates();
  for (const auto& part : parts) {
    for (size_t i = 0; i < part.count; ++i) {
      if (const auto* resplit = resplit_of(part, i, resplits)) {
        detail::OpenedGate open(*gates[i]);
        auto& optimizer = *gates[i]->optimizer();
        const auto& plan = resplit->plan;
        sharding::load_resplit(
            optimizer, plan.live, plan.rank, plan.part, plan.saved,
            [&](int64_t process) {
              load_archive(dir / optimizer_slice_file(i, process, resplit->per_process),
                           [&](auto& archive) { optimizer.load(archive); });
            },
            resplit->where);
        run.move_optimizer_state(optimizer);
        continue;
      }
      const auto file = part.per_process
                            ? per_process_file(part.file(i), part.file_rank_of(run.process_index))
                            : part.file(i);
      part.load(dir / file, i);
    }
  }
}

/// The gradients accumulated by the window the checkpoint was taken in, or none between windows,
/// and the window's counters handed back.
void restore_window(const CheckpointInputs& run, const fs::path& dir, bool window,
                    const Summary& summary) {
  optim::AllGatesOpen open(*run.optimizers);
  const auto file = dir / checkpoints::window_gradients_file(run.process_index);
  auto accumulated =
      window ? load_safetensors(file.string()) : std::map<std::string, torch::Tensor>{};
  WindowCounters counters{
      summary.integer("step"), summary.json.value("micro_step", int64_t{0}), {}};
  // A window of backward(loss_sum, num_items) goes on counting from what it had counted.
  const auto items = accumulated.find(kWindowItems);
  if (items != accumulated.end()) {
    counters.items = {true, true, items->second.item<int64_t>()};
    accumulated.erase(items);
  }
  checkpoints::restore_window_gradients(run.models, gated_optimizers(*run.optimizers), accumulated,
                                        file.string());
  run.restore_window(counters, window);
}

}  // namespace

std::string save_state(const CheckpointInputs& run, const std::string& requested_dir) {
  const auto& project = *run.project;
  const fs::path dir = folder_to_save(project, requested_dir);
  // The process that assembles and swaps the folder: the main one, or each machine's first with
  // save_on_each_node (no shared filesystem).
  const bool coordinator = project.save_on_each_node() ? run.local_main_process : run.main_process;
  const fs::path staging = util::staging_folder_of(dir.string());
  if (coordinator) {
    fs::remove_all(staging);
    fs::create_directories(staging);
  }
  run.wait_for_everyone();

  // FULL_SHARD models' weights are gathered by every process, for the coordinator to write
  // (FULL_STATE_DICT), or each process writes its shards (SHARDED_STATE_DICT).
  ModelsLayout layout{{}, sharded_models_of(run), std::nullopt, {}};
  // The pre-hooks may save models their own way and take them off the list.
  std::vector<torch::nn::Module*> models = run.models;
  for (const auto& hook : *run.save_pre_hooks) hook.second(models, staging.string());
  if (!layout.sharded) layout.gathered = whole_models(run, models, coordinator);
  const auto parts = parts_of(run, models, layout, [](torch::optim::Optimizer&) {});
  write_parts(run, parts, staging, coordinator);
  const bool in_window = run.in_window;
  if (in_window) write_window(run, staging);
  run.wait_for_everyone();

  if (coordinator) {
    // Written last: a folder without it was never completed.
    util::write_file_durably((staging / kStateFile).string(),
                             summary_of(run, parts, in_window).dump(2) + "\n");
    if (!dir.parent_path().empty()) fs::create_directories(dir.parent_path());
    util::commit_folder(staging.string(), dir.string());
    // Old checkpoints go only after the new one is in place, so a crash never leaves none.
    if (requested_dir.empty()) remove_oldest_checkpoints(project);
  }
  run.wait_for_everyone();
  return dir.string();
}

std::optional<int64_t> load_state(const CheckpointInputs& run, const std::string& requested_dir,
                                  const LoadStateOptions& options) {
  const auto folder = folder_to_load(*run.project, requested_dir);
  const fs::path& dir = folder.dir;
  const Summary summary = read_summary(dir);
  const SavedLayout saved = read_saved_layout(summary);
  check_layout_fits(dir, saved, options, run);
  if (saved.processes != run.num_processes && run.main_process) {
    std::cerr << "accel: loading " << dir.string() << ", saved by " << saved.processes
              << " processes, into " << run.num_processes
              << ": data loaders resume at the round holding the first batch no saved process had "
                 "started, and processes without a saved generator keep their own\n";
  }
  // The models are read as they were saved (whole or sharded), whatever this run writes.
  const ModelsLayout layout{
      {},
      sharded_models_of(run),
      saved_state_dict_type(summary) == StateDictType::ShardedStateDict,
      run.pipeline ? run.pipeline->stage_models : std::vector<const torch::nn::Module*>{}};
  std::vector<torch::nn::Module*> models = run.models;
  for (const auto& hook : *run.load_pre_hooks) hook.second(models, dir.string());
  const auto parts = parts_of(run, models, layout, run.move_optimizer_state);
  const auto resplits = check_before_loading(run, dir, summary, saved, parts, options);

  load_parts(run, dir, parts, resplits);
  restore_window(run, dir, saved.window, summary);
  // The model's weights were loaded: the shards (the optimizers' parameters) follow them.
  for (auto& shards : run.shards) shards->refresh_from_parameters();
  if (run.process_index < saved.processes) {
    load_generators(dir / random_states_file(run.process_index));
  }
  run.wait_for_everyone();
  return folder.iteration;
}

}  // namespace accel::checkpoints
