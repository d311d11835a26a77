#include "checkpoint_files.h"

#include "util/durable_file.h"

#include <c10/util/Exception.h>

namespace accel::checkpoints {

namespace fs = std::filesystem;

std::string numbered(const std::string& stem, size_t index, const std::string& extension) {
  return index == 0 ? stem + extension : stem + "_" + std::to_string(index) + extension;
}

std::string per_process_file(const std::string& name, int64_t rank) {
  const auto path = fs::path(name);
  return path.stem().string() + "_shard_" + std::to_string(rank) + path.extension().string();
}

std::string optimizer_slice_file(size_t index, int64_t process, bool per_process) {
  const auto name = numbered("optimizer", index, ".pt");
  return per_process ? per_process_file(name, process) : name;
}

void save_archive(const fs::path& path,
                  const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  torch::serialize::OutputArchive archive;
  fill(archive);
  util::DurableFile file(path.string());
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

}  // namespace accel::checkpoints
