#pragma once

// Reading the launcher/runtime contract from the environment: process identity (torchrun, SLURM
// or MPI variables) and typed ACCEL_* values. Lookups go through an EnvLookup so tests can pass a
// map instead of the real environment.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace accel {
namespace distributed {

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

/// The process's real environment.
EnvLookup process_environment();

/// Where a process learns its place in the job.
struct ProcessIdentity {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  /// "torchrun", "slurm", "mpi" or "none" (a plainly started program: one process).
  std::string source = "none";
};

/// Reads torchrun's variables, else SLURM's, else MPI's; none: one process. Throws c10::Error
/// naming the variable when a value is malformed or out of range.
ProcessIdentity detect_process_identity(const EnvLookup& env);

/// Typed reads of one variable; unset or empty gives nullopt, malformed throws naming it.
std::optional<bool> env_bool(const EnvLookup& env, const std::string& name);
std::optional<int64_t> env_int(const EnvLookup& env, const std::string& name);
std::optional<std::string> env_string(const EnvLookup& env, const std::string& name);

}  // namespace distributed
}  // namespace accel
