#include "checkpoint_folders.h"

#include "checkpoint_files.h"
#include "util/durable_file.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <regex>

namespace accel::checkpoints {

namespace fs = std::filesystem;

namespace {

fs::path checkpoints_root(const ProjectConfiguration& project) {
  return fs::path(project.project_dir()) / "checkpoints";
}

}  // namespace

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

bool has_numbered_checkpoint(const ProjectConfiguration& project) {
  TORCH_CHECK(project.automatic_checkpoint_naming(),
              "accel: resume_if_possible() finds checkpoints by automatic_checkpoint_naming; set "
              "it in the ProjectConfiguration (with a project_dir)");
  return !numbered_checkpoints(checkpoints_root(project)).empty();
}

fs::path folder_to_save(const ProjectConfiguration& project, const std::string& requested_dir) {
  if (!requested_dir.empty()) return requested_dir;
  TORCH_CHECK(project.automatic_checkpoint_naming(),
              "accel: save_state() needs a folder unless the project configuration has "
              "automatic_checkpoint_naming");
  const fs::path dir =
      checkpoints_root(project) / ("checkpoint_" + std::to_string(project.iteration()));
  TORCH_CHECK(!fs::exists(dir), "accel: checkpoint folder ", dir.string(),
              " already exists; set project_configuration().iteration() to the number to "
              "continue from");
  return dir;
}

FolderToLoad folder_to_load(const ProjectConfiguration& project, const std::string& requested_dir) {
  fs::path dir = requested_dir;
  std::optional<int64_t> iteration;
  if (dir.empty()) {
    TORCH_CHECK(project.automatic_checkpoint_naming(),
                "accel: load_state() needs a folder unless the project configuration has "
                "automatic_checkpoint_naming");
    const auto folders = numbered_checkpoints(checkpoints_root(project));
    TORCH_CHECK(!folders.empty(), "accel: no checkpoint_<N> folder under ",
                checkpoints_root(project).string());
    dir = folders.back().second;
    iteration = folders.back().first + 1;
  }
  return {util::committed_folder(dir.string(), kStateFile), iteration};
}

void remove_oldest_checkpoints(const ProjectConfiguration& project) {
  if (!project.total_limit()) return;
  auto folders = numbered_checkpoints(checkpoints_root(project));
  const auto limit = static_cast<size_t>(*project.total_limit());
  for (size_t i = 0; i + limit < folders.size(); ++i) fs::remove_all(folders[i].second);
}

}  // namespace accel::checkpoints
