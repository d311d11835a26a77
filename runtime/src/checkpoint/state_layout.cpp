#include "state_layout.h"

#include <accel/grad_scaler.h>

#include "checkpoint_files.h"
#include "sharding/module_tensors.h"
#include "sharding/sharded_state_dict.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace accel::checkpoints {

namespace fs = std::filesystem;

namespace {

/// A part's save and load through torch::serialize archives, one object per file.
template <typename SaveOne, typename LoadOne>
std::pair<Part::FileIo, Part::FileIo> archived(SaveOne save_one, LoadOne load_one) {
  return {[save_one](const fs::path& path, size_t i) {
            save_archive(path, [&](torch::serialize::OutputArchive& a) { save_one(a, i); });
          },
          [load_one](const fs::path& path, size_t i) {
            load_archive(path, [&](torch::serialize::InputArchive& a) { load_one(a, i); });
          }};
}

using checkpoint_folder::model_file;

/// The index of model i's SHARDED_STATE_DICT files, beside `path` (a file of the folder).
fs::path sharded_index_beside(const fs::path& path, size_t i) {
  return path.parent_path() / sharding::sharded_index_name(model_file(i));
}

/// How the models are written: each process its shards, or the coordinator the whole tensors.
void set_model_writing(Part& part, const std::vector<torch::nn::Module*>& models,
                       const ModelsLayout& layout) {
  if (!layout.sharded) {
    part.save = [&layout](const fs::path& path, size_t i) {
      save_safetensors(path.string(), layout.gathered.at(i));
    };
    return;
  }
  const auto& sharded = *layout.sharded;
  part.per_process = true;
  part.file_rank = sharded.rank;
  part.writes = sharded.writes;
  part.save = [&models, &sharded](const fs::path& path, size_t i) {
    std::vector<std::string> files;
    for (int64_t r = 0; r < sharded.processes; ++r) {
      files.push_back(per_process_file(model_file(i), r));
    }
    sharding::save_sharded_model(*models[i], sharded.shards, path.string(),
                                 sharded_index_beside(path, i).string(), files, sharded.rank,
                                 sharded.processes);
  };
}

/// How the models are read: as they were saved, whatever this run writes.
void set_model_reading(Part& part, const std::vector<torch::nn::Module*>& models,
                       const ModelsLayout& layout) {
  if (!layout.saved_sharded) return;  // saving: nothing to read
  part.per_process = false;
  if (*layout.saved_sharded) {
    // Read from the index and the saved slices, whatever this process's own file would be.
    part.file = [](size_t i) { return sharded_index_beside(fs::path("."), i).filename().string(); };
    part.load = [&models, &layout](const fs::path& path, size_t i) {
      const auto index = sharded_index_beside(path, i).string();
      if (layout.sharded) {
        sharding::load_sharded_model(*models[i], layout.sharded->shards, index);
      } else {
        sharding::load_whole_from_sharded_model(*models[i], index);
      }
    };
    part.check = [&models](const fs::path& path, size_t i) {
      sharding::check_sharded_model(*models[i], sharded_index_beside(path, i).string());
    };
    return;
  }
  auto stage = [&models, &layout](size_t i) {
    return std::find(layout.stage_models.begin(), layout.stage_models.end(), models[i]) !=
           layout.stage_models.end();
  };
  part.file = model_file;
  part.load = [&models, stage](const fs::path& path, size_t i) {
    sharding::read_module_tensors(*models[i], path.string(), stage(i));
  };
  part.check = [&models, stage](const fs::path& path, size_t i) {
    TORCH_CHECK(fs::is_regular_file(path), "accel: the checkpoint has no ", path.string());
    sharding::check_module_file(*models[i], path.string(), stage(i));
  };
}

}  // namespace

Part model_part(const std::vector<torch::nn::Module*>& models, const ModelsLayout& layout) {
  Part part{checkpoint_folder::key::kModels, "models", models.size(), model_file, nullptr, nullptr};
  set_model_writing(part, models, layout);
  set_model_reading(part, models, layout);
  return part;
}

Part optimizer_part(const optim::OptimizerRegistry& optimizers,
                    std::function<void(torch::optim::Optimizer&)> on_loaded, bool sharded) {
  // Inside an accumulation window the gates hold the parameter groups aside: opened, the saved
  // and loaded groups are the real ones.
  const auto& gates = optimizers.gates();
  auto io = archived(
      [&gates](auto& a, size_t i) {
        detail::OpenedGate open(*gates[i]);
        // Each group's options (a scheduler's learning rate) come with it: LibTorch's
        // Optimizer::load assigns the saved ones.
        gates[i]->optimizer()->save(a);
      },
      [&gates, on_loaded](auto& a, size_t i) {
        detail::OpenedGate open(*gates[i]);
        gates[i]->optimizer()->load(a);
        on_loaded(*gates[i]->optimizer());
      });
  Part part{"optimizers", "optimizers",
            gates.size(), [](size_t i) { return numbered("optimizer", i, ".pt"); },
            io.first,     io.second};
  part.per_process = sharded;
  part.resplits = true;
  return part;
}

Part stateful_part(const optim::StatefulParts& stateful, optim::StatefulParts::Kind kind) {
  const auto& parts = stateful.of(kind);
  auto io = archived([&parts](auto& a, size_t i) { parts[i]->save_state(a); },
                     [&parts](auto& a, size_t i) { parts[i]->load_state(a); });
  const bool schedulers = kind == optim::StatefulParts::Kind::scheduler;
  return {schedulers ? "schedulers" : "data_loaders",
          schedulers ? "schedulers" : "data loaders",
          parts.size(),
          [schedulers](size_t i) {
            return numbered(schedulers ? "scheduler" : "data_loader", i, ".pt");
          },
          io.first,
          io.second};
}

Part scaler_part(const optim::OptimizerRegistry& optimizers) {
  auto* scaler = optimizers.scaler();
  auto io = archived([scaler](auto& a, size_t) { scaler->save(a); },
                     [scaler](auto& a, size_t) { scaler->load(a); });
  Part part{"scaler",
            "fp16 loss-scaler state",
            scaler != nullptr ? 1u : 0u,
            [](size_t) { return std::string("scaler.pt"); },
            io.first,
            io.second};
  part.flag = true;
  part.used_with = "fp16";
  return part;
}

Part custom_objects_part(const std::vector<detail::CheckpointHooks>& objects) {
  auto io = archived([&objects](auto& a, size_t i) { objects[i].save(a); },
                     [&objects](auto& a, size_t i) { objects[i].load(a); });
  return {
      "custom_objects", "registered objects",
      objects.size(),   [](size_t i) { return "custom_checkpoint_" + std::to_string(i) + ".pt"; },
      io.first,         io.second};
}

std::vector<Part> checkpoint_parts(
    const std::vector<torch::nn::Module*>& models, const ModelsLayout& layout,
    const optim::OptimizerRegistry& optimizers, const optim::StatefulParts& stateful,
    const std::vector<detail::CheckpointHooks>& custom_objects,
    std::function<void(torch::optim::Optimizer&)> on_optimizer_loaded, bool sharded_optimizers) {
  return {model_part(models, layout),
          optimizer_part(optimizers, std::move(on_optimizer_loaded), sharded_optimizers),
          stateful_part(stateful, optim::StatefulParts::Kind::scheduler),
          stateful_part(stateful, optim::StatefulParts::Kind::data_loader),
          scaler_part(optimizers),
          custom_objects_part(custom_objects)};
}

}  // namespace accel::checkpoints
