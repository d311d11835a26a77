#include "environment.h"
#include "accel_common/contract.h"
#include "accel_common/slurm_nodelist.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace accel {
namespace distributed {

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
  auto parsed = contract::parse_bool(*value);
  TORCH_CHECK(parsed, "accel: invalid ", name, ": '", *value,
              "' (expected 1/0, true/false, yes/no)");
  return parsed;
}

std::optional<int64_t> env_int(const EnvLookup& env, const std::string& name) {
  auto value = env_string(env, name);
  if (!value) return std::nullopt;
  auto parsed = contract::parse_integer(*value);
  TORCH_CHECK(parsed, "accel: invalid ", name, ": '", *value, "' (expected an integer)");
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
    {contract::kRank, contract::kWorldSize, contract::kLocalRank, contract::kLocalWorldSize,
     "torchrun"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "slurm"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "mpi"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "mpi"},
};

// SLURM writes per-node task counts compressed: "2(x3),1" is 2, 2, 2, 1. The count on node
// `node`; `node` unknown (-1) is fine when every node runs the same number.
std::optional<int64_t> slurm_tasks_on_node(const std::string& name, const std::string& value,
                                           int64_t node) {
  std::vector<int64_t> counts;
  std::stringstream items(value);
  std::string item;
  while (std::getline(items, item, ',')) {
    int64_t count = 0, repeat = 1;
    char open = 0, x = 0, close = 0;
    std::istringstream in(item);
    const bool plain = static_cast<bool>(in >> count) && in.peek() == EOF;
    std::istringstream again(item);
    const bool repeated = !plain &&
                          static_cast<bool>(again >> count >> open >> x >> repeat >> close) &&
                          open == '(' && x == 'x' && close == ')' && again.peek() == EOF;
    TORCH_CHECK((plain || repeated) && count > 0 && repeat > 0, "accel: invalid ", name, ": '",
                value, "' (expected counts such as 4 or 2(x3),1)");
    counts.insert(counts.end(), static_cast<size_t>(repeat), count);
  }
  TORCH_CHECK(!counts.empty(), "accel: invalid ", name, ": '", value,
              "' (expected counts such as 4)");
  if (node >= 0) {
    TORCH_CHECK(node < static_cast<int64_t>(counts.size()), "accel: invalid ",
                contract::kSlurmNodeId, ": ", node, " (", name, " '", value, "' names ",
                counts.size(), " nodes)");
    return counts[static_cast<size_t>(node)];
  }
  const bool uniform =
      std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts.front(); });
  TORCH_CHECK(uniform, "accel: ", name, " '", value,
              "' gives nodes different task counts; "
              "set ",
              contract::kSlurmNodeId, " (srun does) or ", contract::kLocalWorldSize);
  return counts.front();
}

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
    TORCH_CHECK(id.world_size >= 1, "accel: invalid ", names.world_size, ": ", id.world_size,
                " (expected at least 1)");
    TORCH_CHECK(id.rank >= 0 && id.rank < id.world_size, "accel: invalid ", names.rank, ": ",
                id.rank, " (expected 0 <= rank < ", names.world_size, " = ", id.world_size, ")");
    id.local_rank = env_int(env, names.local_rank).value_or(id.rank);
    std::optional<int64_t> local_world;
    if (id.source == "slurm") {
      // SLURM_NTASKS_PER_NODE may read "2(x3)": this node's count from the compressed form.
      if (auto value = env_string(env, names.local_world_size)) {
        local_world = slurm_tasks_on_node(names.local_world_size, *value,
                                          env_int(env, contract::kSlurmNodeId).value_or(-1));
      }
    } else {
      local_world = env_int(env, names.local_world_size);
    }
    id.local_world_size = local_world.value_or(id.world_size);
    TORCH_CHECK(id.local_rank >= 0 && id.local_rank < id.local_world_size, "accel: invalid ",
                names.local_rank, ": ", id.local_rank, " (expected 0 <= local rank < ",
                id.local_world_size, ")");
    break;
  }
  if (auto addr = env_string(env, contract::kMasterAddr)) {
    id.master_addr = *addr;
  } else if (id.source == "slurm") {
    if (auto nodes = env_string(env, contract::kSlurmNodeList))
      id.master_addr = detail::first_slurm_host(*nodes);
  }
  if (auto port = env_int(env, contract::kMasterPort)) {
    TORCH_CHECK(*port > 0 && *port < 65536, "accel: invalid ", contract::kMasterPort, ": ", *port,
                " (expected 1..65535)");
    id.master_port = *port;
  }
  return id;
}

}  // namespace distributed
}  // namespace accel
