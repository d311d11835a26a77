// Accelerator::save_state / load_state: everything a resumed run needs, written as one folder that
// replaces the previous one only when complete.

#include "accelerator_impl.h"
#include "durable_file.h"
#include "module_tensors.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#ifdef ACCEL_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <fcntl.h>
#include <stdio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <regex>

namespace accel {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStateFile = "accel_state.json";
constexpr int kFormatVersion = 1;

std::string numbered(const std::string& stem, size_t index, const std::string& extension) {
  return index == 0 ? stem + extension : stem + "_" + std::to_string(index) + extension;
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

/// The backup name of a checkpoint folder while a newer one replaces it (see commit_folder).
fs::path backup_of(const fs::path& dir) { return dir.string() + ".old"; }
fs::path staging_of(const fs::path& dir) { return dir.string() + ".partial"; }

/// Swaps the complete `staging` folder into `dir`. Where the filesystem can exchange two names
/// atomically (renameat2 RENAME_EXCHANGE), `dir` is never missing; elsewhere the old folder is
/// renamed to `dir.old` first, and load_state falls back to it if a crash leaves no `dir`.
void commit_folder(const fs::path& staging, const fs::path& dir) {
  detail::sync_directory(staging.string());
  if (fs::exists(dir)) {
#ifdef RENAME_EXCHANGE
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      detail::sync_directory(dir.parent_path().string());
      fs::remove_all(staging);  // now the previous checkpoint
      return;
    }
#endif
    const auto backup = backup_of(dir);
    fs::remove_all(backup);
    fs::rename(dir, backup);
    fs::rename(staging, dir);
    detail::sync_directory(dir.parent_path().string());
    fs::remove_all(backup);
    return;
  }
  fs::rename(staging, dir);
  detail::sync_directory(dir.parent_path().string());
  fs::remove_all(backup_of(dir));
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

// LibTorch 1.13's Optimizer::load restores the per-parameter state but keeps the learning rates
// the optimizer was built with; a scheduler has changed them since, so they are saved beside it.
void save_optimizer(const torch::optim::Optimizer& optimizer,
                    torch::serialize::OutputArchive& archive) {
  optimizer.save(archive);
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    archive.write("accel.lr." + std::to_string(g),
                  torch::tensor(groups[g].options().get_lr(), torch::kFloat64));
  }
}

void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  optimizer.load(archive);
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    torch::Tensor lr;
    archive.read("accel.lr." + std::to_string(g), lr);
    groups[g].options().set_lr(lr.item<double>());
  }
}

}  // namespace

ProjectConfiguration& Accelerator::project_configuration() { return impl_->project; }
int64_t Accelerator::step() const { return impl_->step; }

void Accelerator::register_checkpoint_hooks(detail::CheckpointHooks hooks) {
  impl_->custom_objects.push_back(std::move(hooks));
}

std::string Accelerator::save_state(const std::string& requested_dir) {
  auto& project = impl_->project;
  fs::path dir = requested_dir;
  fs::path numbered_root;
  if (dir.empty()) {
    TORCH_CHECK(project.automatic_checkpoint_naming(),
                "accel: save_state() needs a folder unless the project configuration has "
                "automatic_checkpoint_naming");
    numbered_root = fs::path(project.project_dir()) / "checkpoints";
    dir = numbered_root / ("checkpoint_" + std::to_string(project.iteration()));
    TORCH_CHECK(!fs::exists(dir), "accel: checkpoint folder ", dir.string(),
                " already exists; set project_configuration().iteration() to the number to "
                "continue from");
  }
  // The process that assembles and swaps the folder: the main one, or each machine's first with
  // save_on_each_node (no shared filesystem).
  const bool coordinator =
      project.save_on_each_node() ? is_local_main_process() : is_main_process();
  const auto staging = staging_of(dir);
  if (coordinator) {
    fs::remove_all(staging);
    fs::create_directories(staging);
  }
  wait_for_everyone();

  const auto& state = *impl_->gradient_state;
  if (coordinator) {
    for (size_t i = 0; i < impl_->models.size(); ++i) {
      save_safetensors((staging / numbered("model", i, ".safetensors")).string(),
                       detail::module_tensors(*impl_->models[i].module));
    }
    for (size_t i = 0; i < state.gates.size(); ++i) {
      save_archive(staging / numbered("optimizer", i, ".pt"),
                   [&](auto& archive) { save_optimizer(*state.gates[i]->optimizer(), archive); });
    }
    for (size_t i = 0; i < state.schedulers.size(); ++i) {
      save_archive(staging / numbered("scheduler", i, ".pt"),
                   [&](auto& archive) { state.schedulers[i]->save_state(archive); });
    }
    for (size_t i = 0; i < state.loaders.size(); ++i) {
      save_archive(staging / numbered("data_loader", i, ".pt"),
                   [&](auto& archive) { state.loaders[i]->save_state(archive); });
    }
    if (state.scaler) {
      save_archive(staging / "scaler.pt", [&](auto& archive) { state.scaler->save(archive); });
    }
    for (size_t i = 0; i < impl_->custom_objects.size(); ++i) {
      save_archive(staging / ("custom_checkpoint_" + std::to_string(i) + ".pt"),
                   [&](auto& archive) { impl_->custom_objects[i].save(archive); });
    }
  }
  // Every process its own generators.
  TORCH_CHECK(fs::is_directory(staging), "accel: save_state: ", staging.string(),
              " does not exist where process ", process_index(),
              " runs; machines that do not share a filesystem need "
              "project_configuration().save_on_each_node(true)");
  save_archive(staging / ("random_states_" + std::to_string(process_index()) + ".pt"),
               [&](auto& archive) {
                 archive.write("cpu", detail::default_generator_state());
#ifdef ACCEL_WITH_CUDA
                 for (int64_t d = 0; d < c10::cuda::device_count(); ++d) {
                   auto gen = at::cuda::detail::getDefaultCUDAGenerator(d);
                   std::lock_guard<std::mutex> lock(gen.mutex());
                   archive.write("cuda" + std::to_string(d), gen.get_state());
                 }
#endif
               });
  wait_for_everyone();

  if (coordinator) {
    nlohmann::json summary = {{"format", kFormatVersion},
                              {"num_processes", num_processes()},
                              {"step", impl_->step},
                              {"iteration", project.iteration()},
                              {"models", impl_->models.size()},
                              {"optimizers", state.gates.size()},
                              {"schedulers", state.schedulers.size()},
                              {"data_loaders", state.loaders.size()},
                              {"custom_objects", impl_->custom_objects.size()},
                              {"scaler", state.scaler != nullptr}};
    // Written last: a folder without it was never completed.
    detail::write_file_durably((staging / kStateFile).string(), summary.dump(2) + "\n");
    if (!dir.parent_path().empty()) fs::create_directories(dir.parent_path());
    commit_folder(staging, dir);
    // Old checkpoints go only after the new one is in place, so a crash never leaves none.
    if (!numbered_root.empty() && project.total_limit()) {
      auto folders = numbered_checkpoints(numbered_root);
      const auto limit = static_cast<size_t>(*project.total_limit());
      for (size_t i = 0; i + limit < folders.size(); ++i) fs::remove_all(folders[i].second);
    }
  }
  wait_for_everyone();
  project.iteration(project.iteration() + 1);
  return dir.string();
}

void Accelerator::load_state(const std::string& requested_dir, const LoadStateOptions& options) {
  auto& project = impl_->project;
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
  if (!fs::exists(dir) && fs::exists(backup_of(dir) / kStateFile)) {
    // A save was interrupted between the two renames of commit_folder: the backup is the
    // complete previous checkpoint.
    dir = backup_of(dir);
  }
  const auto state_path = dir / kStateFile;
  TORCH_CHECK(fs::is_regular_file(state_path), "accel: ", dir.string(),
              " is not a complete checkpoint (it has no ", kStateFile, ")");
  nlohmann::json summary;
  try {
    summary = nlohmann::json::parse(detail::read_file(state_path.string()));
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "accel: ", state_path.string(), " is not valid JSON: ", e.what());
  }
  auto count = [&](const char* key) -> int64_t {
    TORCH_CHECK(summary.contains(key) && summary[key].is_number_integer(), "accel: ",
                state_path.string(), " has no integer '", key, "'");
    return summary[key].get<int64_t>();
  };
  TORCH_CHECK(count("format") == kFormatVersion, "accel: ", state_path.string(),
              " has format ", count("format"), "; this libaccel reads format ", kFormatVersion);
  const int64_t saved_processes = count("num_processes");
  TORCH_CHECK(saved_processes == num_processes() || options.allow_process_count_change(),
              "accel: ", dir.string(), " was saved by ", saved_processes,
              " processes and this job has ", num_processes(),
              "; random generators and data-loader positions are per process, so resume with the "
              "same number of processes, or pass "
              "accel::LoadStateOptions().allow_process_count_change(true)");
  if (saved_processes != num_processes() && is_main_process()) {
    std::cerr << "accel: loading " << dir.string() << ", saved by " << saved_processes
              << " processes, into " << num_processes()
              << ": data loaders resume at the round holding the first batch no saved process had "
                 "started, and processes without a saved generator keep their own\n";
  }
  auto& state = *impl_->gradient_state;
  auto expect = [&](const char* key, size_t have, const char* what) {
    TORCH_CHECK(count(key) == static_cast<int64_t>(have), "accel: ", dir.string(), " holds ",
                count(key), " ", what, " and this program prepared ", have,
                "; prepare the same objects in the same order as the saved run");
  };
  expect("models", impl_->models.size(), "models");
  expect("optimizers", state.gates.size(), "optimizers");
  expect("schedulers", state.schedulers.size(), "schedulers");
  expect("data_loaders", state.loaders.size(), "data loaders");
  expect("custom_objects", impl_->custom_objects.size(), "registered objects");

  for (size_t i = 0; i < impl_->models.size(); ++i) {
    const auto path = (dir / numbered("model", i, ".safetensors")).string();
    detail::read_module_tensors(*impl_->models[i].module, path);
  }
  for (size_t i = 0; i < state.gates.size(); ++i) {
    auto* optimizer = state.gates[i]->optimizer();
    load_archive(dir / numbered("optimizer", i, ".pt"),
                 [&](auto& archive) { load_optimizer(*optimizer, archive); });
    move_optimizer_state(*optimizer);
  }
  for (size_t i = 0; i < state.schedulers.size(); ++i) {
    load_archive(dir / numbered("scheduler", i, ".pt"),
                 [&](auto& archive) { state.schedulers[i]->load_state(archive); });
  }
  for (size_t i = 0; i < state.loaders.size(); ++i) {
    load_archive(dir / numbered("data_loader", i, ".pt"),
                 [&](auto& archive) { state.loaders[i]->load_state(archive); });
  }
  const bool saved_scaler = summary.value("scaler", false);
  TORCH_CHECK(saved_scaler == (state.scaler != nullptr), "accel: ", dir.string(),
              saved_scaler ? " has fp16 loss-scaler state and this run does not use fp16"
                           : " has no loss-scaler state and this run uses fp16");
  if (state.scaler) {
    load_archive(dir / "scaler.pt", [&](auto& archive) { state.scaler->load(archive); });
  }
  for (size_t i = 0; i < impl_->custom_objects.size(); ++i) {
    load_archive(dir / ("custom_checkpoint_" + std::to_string(i) + ".pt"),
                 [&](auto& archive) { impl_->custom_objects[i].load(archive); });
  }
  const auto generators = dir / ("random_states_" + std::to_string(process_index()) + ".pt");
  if (process_index() < saved_processes) {
    load_archive(generators, [&](auto& archive) {
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
  impl_->step = count("step");
  wait_for_everyone();
}

}  // namespace accel
