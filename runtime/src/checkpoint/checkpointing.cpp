// Accelerator::save_state / load_state: everything a resumed run needs, written as one folder that
// replaces the previous one only when complete.

#include "checkpoint_checks.h"
#include "core/accelerator_impl.h"
#include "sharding/module_tensors.h"
#include "sharding/optimizer_resharding.h"
#include "sharding/sharded_state_dict.h"
#include "util/collective_label.h"
#include "util/durable_file.h"
#include "window_gradients.h"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>

#ifdef ACCEL_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <regex>

namespace accel {
namespace {

/// The entry of a window's gradient file that holds backward(loss_sum, num_items)'s count.
constexpr const char* kWindowItems = "accel.window_items";

namespace fs = std::filesystem;

constexpr const char* kStateFile = "accel_state.json";
constexpr int kFormatVersion = 1;

std::string numbered(const std::string& stem, size_t index, const std::string& extension) {
  return index == 0 ? stem + extension : stem + "_" + std::to_string(index) + extension;
}

/// A file every process writes for itself (a sharded optimizer's state): "optimizer_shard_3.pt".
std::string per_process_file(const std::string& name, int64_t rank) {
  const auto path = fs::path(name);
  return path.stem().string() + "_shard_" + std::to_string(rank) + path.extension().string();
}

void save_archive(const fs::path& path,
                  const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  torch::serialize::OutputArchive archive;
  fill(archive);
  detail::DurableFile file(path.string());
  archive.save_to([&](const void* data, size_t size) {
    file.write(data, size);
    return size;
  });
  file.commit();
}

void load_archive(const fs::path& path,
                  const std::function<void(torch::serialize::InputArchive&)>& use) {
  TORCH_CHECK(fs::is_regular_file(path), "accel: the checkpoint has no ", path.string());
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path.string(), torch::kCPU);
    use(archive);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "accel: cannot load ", path.string(), ": ", e.what_without_backtrace());
  }
}

/// checkpoint_<N> folders under `root`, oldest (lowest N) first.
std::vector<std::pair<int64_t, fs::path>> numbered_checkpoints(const fs::path& root) {
  static const std::regex name(R"(checkpoint_(\d+))");
  std::vector<std::pair<int64_t, fs::path>> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    std::smatch match;
    const auto file = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(file, match, name)) {
      out.emplace_back(std::stoll(match[1].str()), entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// One kind of object a checkpoint holds. save_state and load_state both walk the table from
/// checkpoint_parts(), so the folder's layout is written down once.
struct Part {
  /// Its entry in accel_state.json: how many were saved (for a flag, whether there was one).
  const char* key;
  /// What it is called in errors ("data loaders").
  const char* what;
  size_t count;
  /// A flag part is saved as true/false; its absence in the run is named by `used_with`.
  bool flag = false;
  const char* used_with = "";
  /// Saved by every process into its own file (per_process_file), not by the main one.
  bool per_process = false;
  /// Its i-th file in the folder.
  std::function<std::string(size_t)> file;
  std::function<void(const fs::path&, size_t)> save;
  std::function<void(const fs::path&, size_t)> load;
  /// Checks the i-th file against the run before anything is loaded (none: nothing to check).
  std::function<void(const fs::path&, size_t)> check = nullptr;
  /// For a per-process part: the number in this process's file names (-1: its process index),
  /// and whether this process writes them (HYBRID_SHARD's other machines hold the same shards).
  int64_t file_rank = -1;
  bool writes = true;
};

/// SHARDED_STATE_DICT in effect: every process saves its shards of the models (under
/// HYBRID_SHARD, the processes of the first machine: the others hold the same shards).
struct ShardedModels {
  std::vector<std::shared_ptr<detail::OptimizerShards>> shards;
  int64_t rank = 0, processes = 1;  // among the processes the shards are cut among
  bool writes = true;
};

/// What the main process writes. Generators are per process and saved apart (see save_state).
/// `gathered` holds the models' tensors to write (save_state gathers them; empty for a load),
/// unless `sharded_models` is given. For a load, `saved_sharded_models` says whether the
/// checkpoint holds its models as SHARDED_STATE_DICT.
std::vector<Part> checkpoint_parts(
    const std::vector<torch::nn::Module*>& models, const std::vector<NamedTensors>& gathered,
    const std::optional<ShardedModels>& sharded_models, std::optional<bool> saved_sharded_models,
    detail::GradientState& state, std::vector<detail::CheckpointHooks>& custom_objects,
    const std::function<void(torch::optim::Optimizer&)>& on_optimizer_loaded,
    bool sharded_optimizers) {
  auto archive = [](auto save_one, auto load_one) {
    return std::make_pair(
        [save_one](const fs::path& path, size_t i) {
          save_archive(path, [&](torch::serialize::OutputArchive& a) { save_one(a, i); });
        },
        [load_one](const fs::path& path, size_t i) {
          load_archive(path, [&](torch::serialize::InputArchive& a) { load_one(a, i); });
        });
  };
  std::vector<Part> parts;
  // Written as the run holds its models; read as they were saved (`saved_sharded_models`): a
  // sharded model loads into a whole one and the other way round, on any process count.
  const auto index_of = [](const fs::path& path, size_t i) {
    return path.parent_path() / detail::sharded_index_name(numbered("model", i, ".safetensors"));
  };
  if (sharded_models) {
    const auto& sharded = *sharded_models;
    parts.push_back({"models", "models", models.size(), false, "", true,
                     [](size_t i) { return numbered("model", i, ".safetensors"); },
                     [&models, &sharded, index_of](const fs::path& path, size_t i) {
                       std::vector<std::string> files;
                       const auto name = numbered("model", i, ".safetensors");
                       for (int64_t r = 0; r < sharded.processes; ++r) {
                         files.push_back(per_process_file(name, r));
                       }
                       detail::save_sharded_model(*models[i], sharded.shards, path.string(),
                                                  index_of(path, i).string(), files, sharded.rank,
                                                  sharded.processes);
                     },
                     nullptr});
    parts.back().file_rank = sharded.rank;
    parts.back().writes = sharded.writes;
  } else {
    parts.push_back({"models", "models", models.size(), false, "", false,
                     [](size_t i) { return numbered("model", i, ".safetensors"); },
                     [&gathered](const fs::path& path, size_t i) {
                       save_safetensors(path.string(), gathered.at(i));
                     },
                     nullptr});
  }
  auto& model_part = parts.back();
  if (!saved_sharded_models) {
    // Saving: nothing to read.
  } else if (*saved_sharded_models) {
    // Read from the index and the saved slices, whatever this process's own file would be.
    model_part.per_process = false;
    model_part.file = [index_of](size_t i) {
      return index_of(fs::path("."), i).filename().string();
    };
    model_part.load = [&models, sharded_models, index_of](const fs::path& path, size_t i) {
      const auto index = index_of(path, i).string();
      if (sharded_models) {
        detail::load_sharded_model(*models[i], sharded_models->shards, index);
      } else {
        detail::load_whole_from_sharded_model(*models[i], index);
      }
    };
    model_part.check = [&models, index_of](const fs::path& path, size_t i) {
      detail::check_sharded_model(*models[i], index_of(path, i).string());
    };
  } else {
    model_part.per_process = false;
    model_part.file = [](size_t i) { return numbered("model", i, ".safetensors"); };
    model_part.load = [&models](const fs::path& path, size_t i) {
      detail::read_module_tensors(*models[i], path.string());
    };
    model_part.check = [&models](const fs::path& path, size_t i) {
      TORCH_CHECK(fs::is_regular_file(path), "accel: the checkpoint has no ", path.string());
      detail::check_module_file(*models[i], path.string());
    };
  }
  // Inside an accumulation window the gates hold the parameter groups aside: opened, the saved
  // and loaded groups are the real ones.
  auto optimizers = archive(
      [&state](auto& a, size_t i) {
        detail::OpenedGate open(*state.gates[i]);
        // Each group's options (a scheduler's learning rate) come with it: LibTorch's
        // Optimizer::load assigns the saved ones.
        state.gates[i]->optimizer()->save(a);
      },
      [&state, on_optimizer_loaded](auto& a, size_t i) {
        detail::OpenedGate open(*state.gates[i]);
        state.gates[i]->optimizer()->load(a);
        on_optimizer_loaded(*state.gates[i]->optimizer());
      });
  parts.push_back({"optimizers", "optimizers", state.gates.size(), false, "", sharded_optimizers,
                   [](size_t i) { return numbered("optimizer", i, ".pt"); }, optimizers.first,
                   optimizers.second});
  auto schedulers = archive([&state](auto& a, size_t i) { state.schedulers[i]->save_state(a); },
                            [&state](auto& a, size_t i) { state.schedulers[i]->load_state(a); });
  parts.push_back({"schedulers", "schedulers", state.schedulers.size(), false, "", false,
                   [](size_t i) { return numbered("scheduler", i, ".pt"); }, schedulers.first,
                   schedulers.second});
  auto loaders = archive([&state](auto& a, size_t i) { state.loaders[i]->save_state(a); },
                         [&state](auto& a, size_t i) { state.loaders[i]->load_state(a); });
  parts.push_back({"data_loaders", "data loaders", state.loaders.size(), false, "", false,
                   [](size_t i) { return numbered("data_loader", i, ".pt"); }, loaders.first,
                   loaders.second});
  auto scaler = archive([&state](auto& a, size_t) { state.scaler->save(a); },
                        [&state](auto& a, size_t) { state.scaler->load(a); });
  parts.push_back({"scaler", "fp16 loss-scaler state", state.scaler ? 1u : 0u, true, "fp16", false,
                   [](size_t) { return std::string("scaler.pt"); }, scaler.first, scaler.second});
  auto custom = archive([&custom_objects](auto& a, size_t i) { custom_objects[i].save(a); },
                        [&custom_objects](auto& a, size_t i) { custom_objects[i].load(a); });
  parts.push_back({"custom_objects", "registered objects", custom_objects.size(), false, "", false,
                   [](size_t i) { return "custom_checkpoint_" + std::to_string(i) + ".pt"; },
                   custom.first, custom.second});
  return parts;
}

/// The ShardedModels of a FULL_SHARD or HYBRID_SHARD run with SHARDED_STATE_DICT (`group`: the
/// processes the shards are cut among; `replicas`: HYBRID_SHARD's other machines); none otherwise.
std::optional<ShardedModels> sharded_models_for(
    const ResolvedOptions& options, bool shards_parameters,
    std::vector<std::shared_ptr<detail::OptimizerShards>> shards, const c10d::ProcessGroup* group,
    const c10d::ProcessGroup* replicas) {
  if (!shards_parameters || options.fsdp_state_dict_type != "SHARDED_STATE_DICT") {
    return std::nullopt;
  }
  return ShardedModels{std::move(shards), group->getRank(), group->getSize(),
                       replicas == nullptr || replicas->getRank() == 0};
}

/// The number in `part`'s file names for process `process`.
int64_t file_rank(const Part& part, int64_t process) {
  return part.file_rank >= 0 ? part.file_rank : process;
}

std::string random_states_file(int64_t rank) {
  return "random_states_" + std::to_string(rank) + ".pt";
}

/// The file of saved slice `slice` of optimizer `index` (NO_SHARD: its one file).
std::string optimizer_slice_file(size_t index, int64_t slice, bool saved_sharded) {
  const auto name = numbered("optimizer", index, ".pt");
  return saved_sharded ? per_process_file(name, slice) : name;
}

/// The optimizers of the live gates, as window_gradients takes them (the gates must be open).
std::vector<torch::optim::Optimizer*> gated_optimizers(const detail::GradientState& state) {
  std::vector<torch::optim::Optimizer*> optimizers;
  for (auto* gate : state.gates) optimizers.push_back(gate->optimizer());
  return optimizers;
}

/// Opens every gate for its lifetime.
struct AllGatesOpen {
  std::vector<std::unique_ptr<detail::OpenedGate>> opened;
  explicit AllGatesOpen(const detail::GradientState& state) {
    for (auto* gate : state.gates) opened.push_back(std::make_unique<detail::OpenedGate>(*gate));
  }
};

/// The folder load_state reads: the one asked for, or the newest numbered one (the project's
/// iteration then continues after it); a save interrupted between the two renames of
/// commit_folder left the previous checkpoint, complete, in its backup.
fs::path folder_to_load(ProjectConfiguration& project, const std::string& requested_dir) {
  fs::path dir = requested_dir;
  if (dir.empty()) {
    TORCH_CHECK(project.automatic_checkpoint_naming(),
                "accel: load_state() needs a folder unless the project configuration has "
                "automatic_checkpoint_naming");
    const auto folders = numbered_checkpoints(fs::path(project.project_dir()) / "checkpoints");
    TORCH_CHECK(!folders.empty(), "accel: no checkpoint_<N> folder under ",
                (fs::path(project.project_dir()) / "checkpoints").string());
    dir = folders.back().second;
    project.iteration(folders.back().first + 1);
  }
  return detail::committed_folder(dir.string(), kStateFile);
}

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
    summary.json = nlohmann::json::parse(detail::read_file(summary.path.string()));
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "accel: ", summary.path.string(), " is not valid JSON: ", e.what());
  }
  TORCH_CHECK(summary.integer("format") == kFormatVersion, "accel: ", summary.path.string(),
              " has format ", summary.integer("format"), "; this libaccel reads format ",
              kFormatVersion);
  return summary;
}

/// The generators of this process: CPU, and every CUDA device's.
void save_generators(const fs::path& file) {
  save_archive(file, [&](auto& archive) {
    archive.write("cpu", detail::default_generator_state());
#ifdef ACCEL_WITH_CUDA
    for (int64_t d = 0; d < c10::cuda::device_count(); ++d) {
      auto gen = at::cuda::detail::getDefaultCUDAGenerator(d);
      std::lock_guard<std::mutex> lock(gen.mutex());
      archive.write("cuda" + std::to_string(d), gen.get_state());
    }
#endif
  });
}

void load_generators(const fs::path& file) {
  load_archive(file, [&](auto& archive) {
    torch::Tensor cpu;
    archive.read("cpu", cpu);
    detail::set_default_generator_state(cpu);
#ifdef ACCEL_WITH_CUDA
    for (int64_t d = 0; d < c10::cuda::device_count(); ++d) {
      torch::Tensor saved;
      if (!archive.try_read("cuda" + std::to_string(d), saved)) continue;
      auto gen = at::cuda::detail::getDefaultCUDAGenerator(d);
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(saved);
    }
#endif
  });
}

/// An optimizer whose saved layout is not this run's, and the saved files its state comes from.
struct Resplit {
  detail::OptimizerLayout live, saved;
  int64_t rank = 0;  // this process's slice of `live`
  bool saved_sharded = false;
  std::string where;  // for errors
  std::vector<std::string> files;
};

/// The optimizers to re-split on load: none for those laid out as saved on as many processes
/// (each process reads its own file); `saved_optimizers` is the summary's optimizer_layout. With
/// another process count even an equal layout goes through the re-split, which reads each slice
/// from its first holder's file (under HYBRID_SHARD the other machines' processes hold the same
/// slices under other numbers).
std::vector<std::optional<Resplit>> plan_resplits(
    const detail::GradientState& state,
    const std::vector<std::shared_ptr<detail::OptimizerShards>>& shards,
    const nlohmann::json& saved_optimizers, bool saved_sharded, bool same_processes,
    const fs::path& dir, const std::string& state_path) {
  std::vector<std::optional<Resplit>> plans(state.gates.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    detail::OpenedGate open(*state.gates[i]);
    Resplit plan;
    plan.live = detail::layout_of(*state.gates[i]->optimizer(), shards, &plan.rank);
    plan.saved =
        detail::OptimizerLayout::from_json(saved_optimizers.at(i).at("layout"), state_path);
    if (plan.saved == plan.live && same_processes) continue;
    plan.saved_sharded = saved_sharded;
    plan.where = (dir / numbered("optimizer", i, ".pt")).string();
    for (const int64_t slice :
         detail::slices_to_read(plan.saved, plan.live, plan.rank, plan.where)) {
      plan.files.push_back(optimizer_slice_file(i, slice, saved_sharded));
    }
    plans[i] = std::move(plan);
  }
  return plans;
}

/// The folder save_state writes: the one asked for, or with automatic naming
/// project_dir/checkpoints/checkpoint_<iteration>, which must not exist yet.
fs::path folder_to_save(const ProjectConfiguration& project, const std::string& requested_dir) {
  if (!requested_dir.empty()) return requested_dir;
  TORCH_CHECK(project.automatic_checkpoint_naming(),
              "accel: save_state() needs a folder unless the project configuration has "
              "automatic_checkpoint_naming");
  const fs::path dir = fs::path(project.project_dir()) / "checkpoints" /
                       ("checkpoint_" + std::to_string(project.iteration()));
  TORCH_CHECK(!fs::exists(dir), "accel: checkpoint folder ", dir.string(),
              " already exists; set project_configuration().iteration() to the number to "
              "continue from");
  return dir;
}

/// With automatic naming and a total_limit, the oldest checkpoints beyond the limit go.
void remove_oldest_checkpoints(const ProjectConfiguration& project) {
  if (!project.total_limit()) return;
  auto folders = numbered_checkpoints(fs::path(project.project_dir()) / "checkpoints");
  const auto limit = static_cast<size_t>(*project.total_limit());
  for (size_t i = 0; i + limit < folders.size(); ++i) fs::remove_all(folders[i].second);
}

/// The models' whole tensors for the coordinator to write: FULL_SHARD models' are gathered by
/// every process (a collective), the others' read by the coordinator only.
std::vector<NamedTensors> whole_models(const std::vector<torch::nn::Module*>& models,
                                       bool coordinator) {
  std::vector<NamedTensors> gathered(models.size());
  for (size_t i = 0; i < models.size(); ++i) {
    const auto& module = *models[i];
    if (detail::has_sharded_parameters(module)) {
      gathered[i] = detail::module_tensors_to_save(module, coordinator);
    } else if (coordinator) {
      gathered[i] = detail::module_tensors(module);
    }
  }
  return gathered;
}

/// How a checkpoint was cut, from its summary: by how many processes, under which strategy, and
/// its optimizers' layouts.
struct SavedLayout {
  int64_t processes = 1;
  std::string strategy;
  nlohmann::json optimizers;
  /// The layouts are recorded: optimizer state saved in shards is re-split on load (a checkpoint
  /// from before they were recorded is not).
  bool layouts_saved = false;
};

SavedLayout read_saved_layout(const Summary& summary) {
  SavedLayout saved;
  saved.processes = summary.integer("num_processes");
  saved.strategy = summary.json.value("sharding_strategy", "NO_SHARD");
  saved.optimizers = summary.json.value("optimizer_layout", nlohmann::json());
  saved.layouts_saved = saved.optimizers.is_array() && !saved.optimizers.empty() &&
                        saved.optimizers[0].contains("layout");
  return saved;
}

/// How this run cuts its state, against which a checkpoint's SavedLayout is checked.
struct RunLayout {
  int64_t processes;
  std::string strategy;  // in effect
  bool sharded;
  bool has_optimizers;
};

/// A checkpoint from another process count loads only when `options` allow it; optimizer state
/// laid out by another strategy, or sharded over another process count, only when its layouts
/// were recorded (to re-split it).
void check_layout_fits(const fs::path& dir, const SavedLayout& saved,
                       const LoadStateOptions& options, const RunLayout& run) {
  TORCH_CHECK(saved.processes == run.processes || options.allow_process_count_change(),
              "accel: ", dir.string(), " was saved by ", saved.processes,
              " processes and this job has ", run.processes,
              "; random generators and data-loader positions are per process, so resume with the "
              "same number of processes, or pass "
              "accel::LoadStateOptions().allow_process_count_change(true)");
  TORCH_CHECK(saved.layouts_saved || !run.has_optimizers || saved.strategy == run.strategy,
              "accel: ", dir.string(), " was saved with sharding_strategy ", saved.strategy,
              " and this run uses ", run.strategy,
              "; the optimizer state is laid out by the strategy, so resume with the same one");
  TORCH_CHECK(saved.layouts_saved || !run.sharded || saved.processes == run.processes,
              "accel: ", dir.string(), " holds optimizer state sharded over ", saved.processes,
              " processes and this job has ", run.processes,
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

/// The re-split plan of a part's i-th object: only optimizers have one.
const std::optional<Resplit>& resplit_of(const Part& part, size_t i,
                                         const std::vector<std::optional<Resplit>>& resplits) {
  static const std::optional<Resplit> none;
  return std::string(part.key) == "optimizers" ? resplits[i] : none;
}

/// Every file process `rank` will read is there, or the error names all that are not.
void check_files_present(const fs::path& dir, const std::vector<Part>& parts,
                         const std::vector<std::optional<Resplit>>& resplits, int64_t rank,
                         int64_t saved_processes, bool window) {
  std::vector<std::string> missing;
  auto expect = [&](const std::string& file) {
    if (!fs::is_regular_file(dir / file)) missing.push_back(file);
  };
  for (const auto& part : parts) {
    for (size_t i = 0; i < part.count; ++i) {
      if (const auto& plan = resplit_of(part, i, resplits)) {
        for (const auto& file : plan->files) expect(file);
      } else if (part.per_process) {
        expect(per_process_file(part.file(i), file_rank(part, rank)));
      }
    }
  }
  if (rank < saved_processes) expect(random_states_file(rank));
  if (window) expect(detail::window_gradients_file(rank));
  TORCH_CHECK(missing.empty(), "accel: ", dir.string(), " is missing process ", rank,
              "'s files: ", c10::Join(", ", missing));
}

/// Loads every part; an optimizer with a re-split plan is assembled from the saved slices.
void load_parts(const fs::path& dir, const std::vector<Part>& parts,
                const std::vector<std::optional<Resplit>>& resplits,
                detail::GradientState& gradient_state, int64_t rank,
                const std::function<void(torch::optim::Optimizer&)>& on_optimizer_loaded) {
  for (const auto& part : parts) {
    for (size_t i = 0; i < part.count; ++i) {
      if (const auto& plan = resplit_of(part, i, resplits)) {
        detail::OpenedGate open(*gradient_state.gates[i]);
        auto& optimizer = *gradient_state.gates[i]->optimizer();
        detail::load_resplit(
            optimizer, plan->live, plan->rank, plan->saved,
            [&](int64_t slice) {
              load_archive(dir / optimizer_slice_file(i, slice, plan->saved_sharded),
                           [&](auto& archive) { optimizer.load(archive); });
            },
            plan->where);
        on_optimizer_loaded(optimizer);
        continue;
      }
      const auto file =
          part.per_process ? per_process_file(part.file(i), file_rank(part, rank)) : part.file(i);
      part.load(dir / file, i);
    }
  }
}

}  // namespace

ProjectConfiguration& Accelerator::project_configuration() { return impl_->project; }
int64_t Accelerator::step() const { return impl_->step; }

void Accelerator::register_checkpoint_hooks(detail::CheckpointHooks hooks) {
  impl_->custom_objects.push_back(std::move(hooks));
}

std::string Accelerator::save_state(const std::string& requested_dir) {
  detail::CollectiveLabel collective_label("save_state");
  auto& project = impl_->project;
  const fs::path dir = folder_to_save(project, requested_dir);
  // The process that assembles and swaps the folder: the main one, or each machine's first with
  // save_on_each_node (no shared filesystem).
  const bool coordinator =
      project.save_on_each_node() ? is_local_main_process() : is_main_process();
  const fs::path staging = detail::staging_folder_of(dir.string());
  if (coordinator) {
    fs::remove_all(staging);
    fs::create_directories(staging);
  }
  wait_for_everyone();

  // FULL_SHARD models' weights are gathered by every process, for the coordinator to write
  // (FULL_STATE_DICT), or each process writes its shards (SHARDED_STATE_DICT).
  const auto sharded_models =
      sharded_models_for(impl_->options, impl_->shards_parameters(), impl_->live_shards(),
                         impl_->shard_group().get(), impl_->replicate_group().get());
  // The pre-hooks may save models their own way and take them off the list.
  std::vector<torch::nn::Module*> models = impl_->prepared_modules();
  for (const auto& hook : *impl_->save_state_pre_hooks) hook.second(models, staging.string());
  const auto gathered =
      sharded_models ? std::vector<NamedTensors>(models.size()) : whole_models(models, coordinator);
  const auto parts = checkpoint_parts(
      models, gathered, sharded_models, std::nullopt, *impl_->gradient_state, impl_->custom_objects,
      [](torch::optim::Optimizer&) {}, impl_->sharded());
  if (coordinator) {
    for (const auto& part : parts) {
      if (part.per_process) continue;
      for (size_t i = 0; i < part.count; ++i) part.save(staging / part.file(i), i);
    }
  }
  // Every process its own generators.
  TORCH_CHECK(fs::is_directory(staging), "accel: save_state: ", staging.string(),
              " does not exist where process ", process_index(),
              " runs; machines that do not share a filesystem need "
              "project_configuration().save_on_each_node(true)");
  for (const auto& part : parts) {
    if (!part.per_process || !part.writes) continue;
    for (size_t i = 0; i < part.count; ++i) {
      part.save(staging / per_process_file(part.file(i), file_rank(part, process_index())), i);
    }
  }
  save_generators(staging / random_states_file(process_index()));
  // Inside an accumulation window, what it has accumulated so far: each process its own.
  const auto& gradient_state = *impl_->gradient_state;
  const bool in_window = !gradient_state.sync_gradients;
  if (in_window) {
    AllGatesOpen open(gradient_state);
    auto accumulated =
        detail::window_gradients(impl_->prepared_modules(), gated_optimizers(gradient_state));
    // backward(loss_sum, num_items): the items this process counted in the window so far.
    const auto& items = impl_->item_window;
    if (items.open && items.counts_items) {
      accumulated.emplace_back(kWindowItems, torch::tensor({items.items}, torch::kInt64));
    }
    save_safetensors((staging / detail::window_gradients_file(process_index())).string(),
                     accumulated);
  }
  wait_for_everyone();

  if (coordinator) {
    nlohmann::json summary = {
        {"format", kFormatVersion},
        {"num_processes", num_processes()},
        {"step", impl_->step},
        {"iteration", project.iteration()},
        {"sharding_strategy", impl_->effective_sharding_strategy()},
        {"state_dict_type", sharded_models ? "SHARDED_STATE_DICT" : "FULL_STATE_DICT"},
        {"gradient_accumulation_steps", gradient_accumulation_steps()},
        {"micro_step", gradient_state.step},
        {"window_gradients", in_window},
        {"optimizer_layout", detail::describe_optimizers(gradient_state, impl_->live_shards())}};
    for (const auto& part : parts) {
      if (part.flag) {
        summary[part.key] = part.count > 0;
      } else {
        summary[part.key] = part.count;
      }
    }
    // Written last: a folder without it was never completed.
    detail::write_file_durably((staging / kStateFile).string(), summary.dump(2) + "\n");
    if (!dir.parent_path().empty()) fs::create_directories(dir.parent_path());
    detail::commit_folder(staging.string(), dir.string());
    // Old checkpoints go only after the new one is in place, so a crash never leaves none.
    if (requested_dir.empty()) remove_oldest_checkpoints(project);
  }
  wait_for_everyone();
  project.iteration(project.iteration() + 1);
  return dir.string();
}

void Accelerator::load_state(const std::string& requested_dir, const LoadStateOptions& options) {
  detail::CollectiveLabel collective_label("load_state");
  const fs::path dir = folder_to_load(impl_->project, requested_dir);
  const Summary summary = read_summary(dir);
  const SavedLayout saved = read_saved_layout(summary);
  check_layout_fits(dir, saved, options,
                    {num_processes(), impl_->effective_sharding_strategy(), impl_->sharded(),
                     !impl_->gradient_state->gates.empty()});
  if (saved.processes != num_processes() && is_main_process()) {
    std::cerr << "accel: loading " << dir.string() << ", saved by " << saved.processes
              << " processes, into " << num_processes()
              << ": data loaders resume at the round holding the first batch no saved process had "
                 "started, and processes without a saved generator keep their own\n";
  }
  const auto sharded_models =
      sharded_models_for(impl_->options, impl_->shards_parameters(), impl_->live_shards(),
                         impl_->shard_group().get(), impl_->replicate_group().get());
  // The models are read as they were saved (whole or sharded), whatever this run writes.
  const bool saved_sharded_models =
      summary.json.value("state_dict_type", "FULL_STATE_DICT") == "SHARDED_STATE_DICT";
  std::vector<torch::nn::Module*> models = impl_->prepared_modules();
  for (const auto& hook : *impl_->load_state_pre_hooks) hook.second(models, dir.string());
  auto on_optimizer_loaded = [this](torch::optim::Optimizer& optimizer) {
    move_optimizer_state(optimizer);
  };
  const auto parts =
      checkpoint_parts(models, {}, sharded_models, saved_sharded_models, *impl_->gradient_state,
                       impl_->custom_objects, on_optimizer_loaded, impl_->sharded());
  check_part_counts(parts, summary, dir);

  // Everything is checked before anything is loaded: a checkpoint that does not fit leaves the
  // run as it was.
  auto& gradient_state = *impl_->gradient_state;
  const bool same_processes = saved.processes == num_processes();
  const bool window = summary.json.value("window_gradients", false);
  detail::check_accumulation(summary.json, summary.path.string(), saved.processes, window, options,
                             num_processes(), gradient_accumulation_steps());
  detail::check_optimizers(
      saved.optimizers, detail::describe_optimizers(gradient_state, impl_->live_shards()),
      summary.path.string(), [](size_t i) { return numbered("optimizer", i, ".pt"); },
      same_processes && saved.strategy == impl_->effective_sharding_strategy());
  for (const auto& part : parts) {
    for (size_t i = 0; i < part.count && part.check && !part.per_process; ++i) {
      part.check(dir / part.file(i), i);
    }
  }
  const auto resplits =
      saved.layouts_saved
          ? plan_resplits(gradient_state, impl_->live_shards(), saved.optimizers,
                          saved.strategy != "NO_SHARD", same_processes, dir, summary.path.string())
          : std::vector<std::optional<Resplit>>(gradient_state.gates.size());
  check_files_present(dir, parts, resplits, process_index(), saved.processes, window);

  load_parts(dir, parts, resplits, gradient_state, process_index(), on_optimizer_loaded);
  // The gradients accumulated by the window the checkpoint was taken in, or none between windows.
  {
    AllGatesOpen open(gradient_state);
    const auto file = dir / detail::window_gradients_file(process_index());
    auto accumulated =
        window ? load_safetensors(file.string()) : std::map<std::string, torch::Tensor>{};
    // A window of backward(loss_sum, num_items) goes on counting from what it had counted.
    impl_->item_window = {};
    const auto items = accumulated.find(kWindowItems);
    if (items != accumulated.end()) {
      impl_->item_window = {true, true, items->second.item<int64_t>()};
      accumulated.erase(items);
    }
    detail::restore_window_gradients(impl_->prepared_modules(), gated_optimizers(gradient_state),
                                     accumulated, file.string());
  }
  gradient_state.step = summary.json.value("micro_step", int64_t{0});
  gradient_state.sync_gradients = !window;
  // The model's weights were loaded: the shards (the optimizers' parameters) follow them.
  for (auto& shards : impl_->live_shards()) shards->refresh_from_parameters();
  if (process_index() < saved.processes) {
    load_generators(dir / random_states_file(process_index()));
  }
  impl_->step = summary.integer("step");
  wait_for_everyone();
}

bool Accelerator::resume_if_possible() {
  detail::CollectiveLabel collective_label("resume_if_possible");
  if (!impl_->options.resume) return false;
  auto& project = impl_->project;
  TORCH_CHECK(project.automatic_checkpoint_naming(),
              "accel: resume_if_possible() finds checkpoints by automatic_checkpoint_naming; set "
              "it in the ProjectConfiguration (with a project_dir)");
  // Every process decides from the main process's view of the folder, so all load or none do.
  const auto folders = numbered_checkpoints(fs::path(project.project_dir()) / "checkpoints");
  const bool found = broadcast_object(!folders.empty());
  if (!found) return false;
  load_state();
  impl_->resumed = true;
  return true;
}

bool Accelerator::resumed() const { return impl_->resumed; }

namespace {

template <typename Hook>
RemovableHandle add_hook(const std::shared_ptr<std::map<int64_t, Hook>>& hooks, int64_t& next_id,
                         Hook hook) {
  TORCH_CHECK(hook, "accel: a state pre-hook must be callable");
  const int64_t id = next_id++;
  hooks->emplace(id, std::move(hook));
  std::weak_ptr<std::map<int64_t, Hook>> registry = hooks;
  return RemovableHandle([registry, id] {
    if (auto live = registry.lock()) live->erase(id);
  });
}

}  // namespace

RemovableHandle Accelerator::register_save_state_pre_hook(SaveStatePreHook hook) {
  return add_hook(impl_->save_state_pre_hooks, impl_->next_hook_id, std::move(hook));
}

RemovableHandle Accelerator::register_load_state_pre_hook(LoadStatePreHook hook) {
  return add_hook(impl_->load_state_pre_hooks, impl_->next_hook_id, std::move(hook));
}

}  // namespace accel
