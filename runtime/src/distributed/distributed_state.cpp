#include "distributed_state.h"

#include "flight_recorder.h"
#include "util/torch_compat.h"

#include <accel_common/contract.h>
#include <accel_common/name_table.h>

#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <c10/util/Exception.h>

#include <cstdlib>
#include <mutex>
#include <utility>

namespace accel {
namespace distributed {

constexpr std::pair<CollectiveBackend, const char*> kBackends[] = {
    {CollectiveBackend::gloo, "gloo"},
    {CollectiveBackend::nccl, "nccl"},
    {CollectiveBackend::none, "none"},
};

const char* to_string(CollectiveBackend backend) { return name_in(kBackends, backend); }
namespace {

std::mutex process_state_mutex;
std::shared_ptr<DistributedState> process_state;

// The process's groups outlive the program: at exit they are kept, not destroyed. The
// destructor of ProcessGroupNCCL aborts its communicators through the CUDA runtime, which may
// already be going while the program exits, and then the abort throws out of the destructor:
// std::terminate, and a run that finished ends in SIGABRT. Seen on an H200 from the static's own
// destructor ("driver shutting down") and, in one run of three, from an exit handler that
// destroyed it earlier ("CUDA error: no error"). The system takes back their memory, sockets and
// GPU context when the process ends, as it does for a process that is killed.
void keep_process_state_past_exit() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    std::atexit([] {
      std::lock_guard<std::mutex> lock(process_state_mutex);
      // Reachable through this pointer for as long as the process lives: no leak report.
      static const auto* kept = new std::shared_ptr<DistributedState>(std::move(process_state));
      (void)kept;
    });
  });
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::shared_ptr<::gloo::transport::Device> gloo_device(const EnvLookup& env,
                                                       const std::string& master_addr) {
  if (auto ifname = env_string(env, "GLOO_SOCKET_IFNAME")) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(*ifname);
  }
  // A job whose main process is on loopback is all on this host: talk over loopback rather than
  // whatever address the host name resolves to.
  if (is_loopback(master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10::intrusive_ptr<c10d::Store> connect_store(const ProcessIdentity& id,
                                              std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(id.master_port);
  options.isServer = id.rank == 0;
  options.numWorkers = static_cast<size_t>(id.world_size);
  options.waitWorkers = true;
  options.timeout = timeout;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout).count();
  try {
    return c10::make_intrusive<c10d::TCPStore>(id.master_addr, options);
  } catch (const std::exception& e) {
    if (id.rank == 0) {
      TORCH_CHECK(false, "accel: rank 0 could not host the rendezvous at ", id.master_addr, ":",
                  id.master_port, " for ", id.world_size, " processes within ", seconds,
                  " s (is the port in use, or did a process not start?): ", e.what());
    }
    TORCH_CHECK(false, "accel: rank ", id.rank, " could not reach the main process at ",
                id.master_addr, ":", id.master_port, " within ", seconds, " s (check ",
                contract::kMasterAddr, "/", contract::kMasterPort,
                " and that rank 0 is running): ", e.what());
  }
  return {};  // not reached: every failure above throws
}

}  // namespace

JobGroups make_job_groups(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                          bool nccl, std::shared_ptr<::gloo::transport::Device> gloo_device,
                          std::chrono::milliseconds timeout, const std::string& name,
                          bool check_collectives) {
  JobGroups groups;
  // ACCEL_DEBUG: each backend's collectives are first compared across processes, through a Gloo
  // backend of their own (see record_collectives).
  auto checker = [&](const std::string& prefix) {
    return check_collectives
               ? util::make_gloo_backend(c10::make_intrusive<c10d::PrefixStore>(prefix, store),
                                         rank, size, gloo_device, timeout)
               : c10::intrusive_ptr<c10d::Backend>();
  };
  // The backends rendezvous under their own prefixes, so the same store serves both.
  auto gloo = record_collectives(
      util::make_gloo_backend(c10::make_intrusive<c10d::PrefixStore>("gloo", store), rank, size,
                              gloo_device, timeout),
      name + "gloo", checker("gloo-check"));
  groups.host = util::make_process_group(store, rank, size, gloo);
  if (!nccl) {
    groups.device = groups.host;
    groups.backend = CollectiveBackend::gloo;
    return groups;
  }
#ifdef USE_C10D_NCCL
  auto backend = record_collectives(
      util::make_nccl_backend(c10::make_intrusive<c10d::PrefixStore>("nccl", store), rank, size,
                              timeout),
      name + "nccl", checker("nccl-check"));
  keep_process_state_past_exit();
  groups.device = util::make_process_group(store, rank, size, gloo, backend);
  groups.backend = CollectiveBackend::nccl;
  return groups;
#else
  TORCH_CHECK(false,
              "accel: this libaccel was built against a LibTorch without CUDA, so it has no "
              "NCCL backend for CUDA tensors");
#endif
}

std::shared_ptr<DistributedState> DistributedState::get(const GroupSettings& settings) {
  std::lock_guard<std::mutex> lock(process_state_mutex);
  if (!process_state) {
    process_state.reset(
        new DistributedState(detect_process_identity(process_environment()), settings));
  }
  return process_state;
}

std::shared_ptr<DistributedState> DistributedState::existing() {
  std::lock_guard<std::mutex> lock(process_state_mutex);
  return process_state;
}

DistributedState::DistributedState(ProcessIdentity identity, const GroupSettings& settings)
    : identity_(std::move(identity)) {
  if (identity_.world_size == 1) return;
  configure_flight_recorder(flight_settings_from(process_environment(), identity_.rank));
  store_ = connect_store(identity_, settings.timeout);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("accel/default", store_);
  const int rank = static_cast<int>(identity_.rank);
  const int size = static_cast<int>(identity_.world_size);
  try {
    groups_ = make_job_groups(prefixed, rank, size, device(settings.cpu).is_cuda(),
                              gloo_device(process_environment(), identity_.master_addr),
                              settings.timeout, "", settings.debug);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "accel: rank ", rank, " could not connect to the other ", size - 1,
                " processes (rendezvous at ", identity_.master_addr, ":", identity_.master_port,
                "): ", e.what());
  }
}

const DistributedState::HybridGroups& DistributedState::hybrid_groups(
    const GroupSettings& settings) {
  std::lock_guard<std::mutex> lock(hybrid_mutex_);
  if (hybrid_) return *hybrid_;
  const int64_t per_machine = identity_.local_world_size, size = identity_.world_size;
  TORCH_CHECK(per_machine >= 1 && size % per_machine == 0,
              "accel: HYBRID_SHARD needs the same "
              "number of processes on every machine (",
              contract::kLocalWorldSize, " ", per_machine, " does not divide ",
              contract::kWorldSize, " ", size, ")");
  const int64_t machines = size / per_machine;
  TORCH_CHECK(machines > 1,
              "accel: sharding_strategy HYBRID_SHARD shards within each machine and "
              "replicates across machines, and this job's ",
              size,
              " processes are all on one "
              "machine; use FULL_SHARD there (or launch with --num_machines 2 or more)");
  // Ranks are numbered machine by machine (torchrun's and accel launch's order).
  const int64_t machine = identity_.rank / per_machine, local = identity_.rank % per_machine;
  const bool nccl = device(settings.cpu).is_cuda();
  auto group = [&](const std::string& name, int64_t rank, int64_t count) {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("accel/hybrid/" + name, store_);
    try {
      return make_job_groups(prefixed, static_cast<int>(rank), static_cast<int>(count), nccl,
                             gloo_device(process_environment(), identity_.master_addr),
                             settings.timeout, name + "/", settings.debug)
          .device;
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "accel: rank ", identity_.rank, " could not form HYBRID_SHARD's ", name,
                  " group: ", e.what());
    }
    return c10::intrusive_ptr<c10d::ProcessGroup>();  // not reached
  };
  HybridGroups groups;
  groups.shard = group("shard/machine" + std::to_string(machine), local, per_machine);
  groups.replicate = group("replicate/local" + std::to_string(local), machine, machines);
  hybrid_ = std::move(groups);
  return *hybrid_;
}

const DeviceMesh& DistributedState::mesh(const ParallelismConfig& config,
                                         const GroupSettings& settings) {
  std::lock_guard<std::mutex> lock(hybrid_mutex_);
  if (mesh_) {
    const auto& made = mesh_->config();
    TORCH_CHECK(made.dp_replicate_size() == config.dp_replicate_size() &&
                    made.dp_shard_size() == config.dp_shard_size() &&
                    made.tp_size() == config.tp_size() && made.cp_size() == config.cp_size() &&
                    made.pp_size() == config.pp_size(),
                "accel: this process's device mesh was formed by an earlier Accelerator as "
                "pp ",
                made.pp_size(), " x dp_replicate ", made.dp_replicate_size(), " x dp_shard ",
                made.dp_shard_size(), " x cp ", made.cp_size(), " x tp ", made.tp_size(),
                "; an Accelerator with another parallelism_config cannot share it");
    return *mesh_;
  }
  TORCH_CHECK(store_, "accel: a device mesh needs several processes");
  const bool nccl = device(settings.cpu).is_cuda();
  auto make_group = [&](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                        const std::string& name) {
    return make_job_groups(store, rank, size, nccl,
                           gloo_device(process_environment(), identity_.master_addr),
                           settings.timeout, name, settings.debug)
        .device;
  };
  mesh_ = std::make_unique<DeviceMesh>(config, identity_.rank, store_, make_group);
  return *mesh_;
}

const DeviceMesh* DistributedState::existing_mesh() const { return mesh_.get(); }

const c10::intrusive_ptr<c10d::ProcessGroup>& DistributedState::single_process_group(
    const GroupSettings& settings) {
  std::lock_guard<std::mutex> lock(hybrid_mutex_);
  TORCH_CHECK(identity_.world_size == 1,
              "accel: single_process_group() is for a one-process job; this one has ",
              identity_.world_size, " processes");
  if (!single_) {
    single_ = make_job_groups(
                  c10::make_intrusive<c10d::HashStore>(), 0, 1, device(settings.cpu).is_cuda(),
                  c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"), settings.timeout)
                  .device;
  }
  return single_;
}

torch::Device DistributedState::device(bool cpu) const {
  if (cpu || !torch::cuda::is_available()) return torch::kCPU;
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(identity_.local_rank % count));
}

}  // namespace distributed
}  // namespace accel
