#pragma once

// Each process's random generators in a checkpoint: the CPU one and every CUDA device's, in
// random_states_<process>.pt.

#include <cstdint>
#include <filesystem>
#include <string>

namespace accel::checkpoints {

std::string random_states_file(int64_t process);

void save_generators(const std::filesystem::path& file);
/// Restores the generators `file` holds; a CUDA device it has no state for keeps its own.
void load_generators(const std::filesystem::path& file);

}  // namespace accel::checkpoints
