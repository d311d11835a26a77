#include "random_states.h"

#include "checkpoint_files.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#ifdef ACCEL_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <mutex>

namespace accel::checkpoints {

namespace {

/// Each generator this process has, with its key in the archive and whether every checkpoint
/// holds it (the CPU one; a device the saving process did not have keeps its own state).
template <typename Visit>
void for_each_generator(Visit visit) {
  visit("cpu", at::detail::getDefaultCPUGenerator(), true);
#ifdef ACCEL_WITH_CUDA
  for (int64_t d = 0; d < c10::cuda::device_count(); ++d) {
    visit("cuda" + std::to_string(d), at::cuda::detail::getDefaultCUDAGenerator(d), false);
  }
#endif
}

}  // namespace

std::string random_states_file(int64_t process) {
  return "random_states_" + std::to_string(process) + ".pt";
}

void save_generators(const std::filesystem::path& file) {
  save_archive(file, [&](torch::serialize::OutputArchive& archive) {
    for_each_generator([&](const std::string& key, at::Generator generator, bool) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      archive.write(key, generator.get_state());
    });
  });
}

void load_generators(const std::filesystem::path& file) {
  load_archive(file, [&](torch::serialize::InputArchive& archive) {
    for_each_generator([&](const std::string& key, at::Generator generator, bool always_saved) {
      torch::Tensor saved;
      if (always_saved) {
        archive.read(key, saved);
      } else if (!archive.try_read(key, saved)) {
        return;
      }
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(saved);
    });
  });
}

}  // namespace accel::checkpoints
