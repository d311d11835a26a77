#pragma once

// Where checkpoints go: the folder asked for, or with automatic naming
// project_dir/checkpoints/checkpoint_<N>, of which the oldest beyond total_limit are removed.

#include <accel/checkpointing.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace accel::checkpoints {

/// checkpoint_<N> folders under `root`, oldest (lowest N) first.
std::vector<std::pair<int64_t, std::filesystem::path>> numbered_checkpoints(
    const std::filesystem::path& root);

/// The project has a numbered checkpoint to resume from (automatic naming must be on).
bool has_numbered_checkpoint(const ProjectConfiguration& project);

/// The folder save_state writes: the one asked for, or with automatic naming
/// project_dir/checkpoints/checkpoint_<iteration>, which must not exist yet.
std::filesystem::path folder_to_save(const ProjectConfiguration& project,
                                     const std::string& requested_dir);

/// The folder load_state reads: the one asked for, or the newest numbered one (`iteration` is
/// then its number + 1, where the project's numbering continues); a save interrupted between the
/// two renames of commit_folder left the previous checkpoint, complete, in its backup.
struct FolderToLoad {
  std::filesystem::path dir;
  std::optional<int64_t> iteration;
};
FolderToLoad folder_to_load(const ProjectConfiguration& project, const std::string& requested_dir);

/// With automatic naming and a total_limit, the oldest checkpoints beyond the limit go.
void remove_oldest_checkpoints(const ProjectConfiguration& project);

}  // namespace accel::checkpoints
