#include "environment.h"
#include "slurm_nodelist.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace accel {
namespace detail {

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::optional<std::string> env_string(const EnvLookup& env, const std::string& name) {
  auto value = env(name);
  if (!value || value->empty()) return std::nullopt;
  return value;
}

std::optional<bool> env_bool(const EnvLookup& env, const std::string& name) {
  auto value = env_string(env, name);
  if (!value) return std::nullopt;
  std::string lower = *value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  const bool is_false = lower == "0" || lower == "false" || lower == "no" || lower == "off";
  TORCH_CHECK(is_false, "Invalid ", name, ": '", *value, "' (expected 1/0, true/false, yes/no)");
  return false;
}

std::optional<int64_t> env_int(const EnvLookup& env, const std::string& name) {
  auto value = env_string(env, name);
  if (!value) return std::nullopt;
  size_t used = 0;
  int64_t parsed = 0;
  try {
    parsed = std::stoll(*value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TORCH_CHECK(used == value->size() && used > 0, "Invalid ", name, ": '", *value,
              "' (expected an integer)");
  return parsed;
}

namespace {

struct Names {
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
  const char* source;
};

// Checked in order: the first whose rank and world size are both set wins.
constexpr Names kSchemes[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "slurm"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "mpi"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "mpi"},
};

}  // namespace

ProcessIdentity detect_process_identity(const EnvLookup& env) {
  ProcessIdentity id;
  for (const Names& names : kSchemes) {
    auto rank = env_int(env, names.rank);
    auto world = env_int(env, names.world_size);
    if (!rank || !world) continue;
    id.source = names.source;
    id.rank = *rank;
    id.world_size = *world;
    TORCH_CHECK(id.world_size >= 1, "Invalid ", names.world_size, ": ", id.world_size,
                " (expected at least 1)");
    TORCH_CHECK(id.rank >= 0 && id.rank < id.world_size, "Invalid ", names.rank, ": ", id.rank,
                " (expected 0 <= rank < ", names.world_size, " = ", id.world_size, ")");
    id.local_rank = env_int(env, names.local_rank).value_or(id.rank);
    // SLURM_NTASKS_PER_NODE may read "2(x3)"; only a plain number is a usable local size.
    std::optional<int64_t> local_world;
    try {
      local_world = env_int(env, names.local_world_size);
    } catch (const c10::Error&) {
      if (id.source != "slurm") throw;
    }
    id.local_world_size = local_world.value_or(id.world_size);
    TORCH_CHECK(id.local_rank >= 0 && id.local_rank < id.local_world_size, "Invalid ",
                names.local_rank, ": ", id.local_rank, " (expected 0 <= local rank < ",
                id.local_world_size, ")");
    break;
  }
  if (auto addr = env_string(env, "MASTER_ADDR")) {
    id.master_addr = *addr;
  } else if (id.source == "slurm") {
    if (auto nodes = env_string(env, "SLURM_NODELIST")) id.master_addr = first_slurm_host(*nodes);
  }
  if (auto port = env_int(env, "MASTER_PORT")) {
    TORCH_CHECK(*port > 0 && *port < 65536, "Invalid MASTER_PORT: ", *port,
                " (expected 1..65535)");
    id.master_port = *port;
  }
  return id;
}

}  // namespace detail
}  // namespace accel
