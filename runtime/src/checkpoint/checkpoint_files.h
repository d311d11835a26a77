#pragma once

// The names of a checkpoint folder's files, and its torch::serialize archives written whole or
// not at all (util/durable_file.h) and read with errors that name the file.

#include "accel_common/checkpoint_folder.h"

#include <torch/serialize.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace accel::checkpoints {

/// The folder's summary, written last: a folder without it was never completed.
using checkpoint_folder::kStateFile;

/// "optimizer.pt", "optimizer_1.pt", ...: the `index`-th object of a kind.
std::string numbered(const std::string& stem, size_t index, const std::string& extension);

/// A file every process writes for itself (a sharded optimizer's state): "optimizer_shard_3.pt".
std::string per_process_file(const std::string& name, int64_t rank);

/// The file of saved slice `slice` of optimizer `index` (NO_SHARD: its one file).
std::string optimizer_slice_file(size_t index, int64_t process, bool per_process);

void save_archive(const std::filesystem::path& path,
                  const std::function<void(torch::serialize::OutputArchive&)>& fill);
void load_archive(const std::filesystem::path& path,
                  const std::function<void(torch::serialize::InputArchive&)>& use);

}  // namespace accel::checkpoints
