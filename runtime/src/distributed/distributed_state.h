#pragma once

// The process-wide part of an Accelerator (Accelerate's PartialState): who this process is and
// the c10d process group it talks through. Created by the first Accelerator and kept for the life
// of the process, as torch.distributed's default group is.

#include "device_mesh.h"
#include "environment.h"

#include <torch/types.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace gloo {
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace accel {
namespace distributed {

/// What carries the device group's collectives: nothing (one process), Gloo, or NCCL.
enum class CollectiveBackend { none, gloo, nccl };
const char* to_string(CollectiveBackend backend);

/// The process groups of one job (see DistributedState).
struct JobGroups {
  c10::intrusive_ptr<c10d::ProcessGroup> device;
  c10::intrusive_ptr<c10d::ProcessGroup> host;
  CollectiveBackend backend = CollectiveBackend::none;
};

/// Builds a job's groups over `store`: one Gloo backend shared by both groups, and with `nccl` an
/// NCCL backend for the device group's CUDA tensors. `gloo_device` is Gloo's network device.
/// Each backend's collectives go to the flight recorder under `name` + "gloo" or "nccl"; with
/// `check_collectives` (ACCEL_DEBUG) they are first compared across processes.
JobGroups make_job_groups(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                          bool nccl, std::shared_ptr<::gloo::transport::Device> gloo_device,
                          std::chrono::milliseconds timeout, const std::string& name = "",
                          bool check_collectives = false);

/// What the job's groups are made with (the Accelerator's resolved options say).
struct GroupSettings {
  /// The job runs on the CPU even where CUDA is available: no NCCL.
  bool cpu = false;
  /// How long a collective or the rendezvous waits for the other processes.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// ACCEL_DEBUG: collectives are compared across processes before they run.
  bool debug = false;
};

class DistributedState {
 public:
  /// The process's state, created on first use from the environment and `settings`.
  static std::shared_ptr<DistributedState> get(const GroupSettings& settings);
  /// The process's state if an Accelerator created it, else null (for the logger's rank order).
  static std::shared_ptr<DistributedState> existing();

  const ProcessIdentity& identity() const { return identity_; }
  int64_t rank() const { return identity_.rank; }
  int64_t world_size() const { return identity_.world_size; }
  /// The group for tensors on the job's device and the user's collectives: CPU tensors go
  /// through Gloo and, in a CUDA job, CUDA tensors through NCCL (`cpu:gloo,cuda:nccl`). Null in a
  /// one-process job.
  const c10::intrusive_ptr<c10d::ProcessGroup>& device_group() const { return groups_.device; }
  /// Gloo alone, for the runtime's own CPU-side collectives (object gathers, model checks,
  /// triggers, loader state), which an NCCL-only group would reject. Null in a one-process job.
  const c10::intrusive_ptr<c10d::ProcessGroup>& host_group() const { return groups_.host; }
  /// The device group's backend for device tensors (none for one process).
  CollectiveBackend backend() const { return groups_.backend; }

  /// HYBRID_SHARD's two levels, as device groups: `shard` holds the processes of this machine,
  /// `replicate` the processes of the same local rank on every machine.
  struct HybridGroups {
    c10::intrusive_ptr<c10d::ProcessGroup> shard, replicate;
  };
  /// The hybrid groups, created on first use. Collective: every process of the job calls it at
  /// the same point (Accelerator's constructor, under HYBRID_SHARD). Refused when the job runs on
  /// one machine, where HYBRID_SHARD would be FULL_SHARD with an extra collective.
  const HybridGroups& hybrid_groups(const GroupSettings& settings);

  /// The job's device mesh and its groups (device groups, as hybrid_groups'), formed on first
  /// use. Collective: every process calls it at the same point with the same `config`, whose
  /// sizes multiply to the number of processes. A later call with another config is refused:
  /// the groups are the process's, made once.
  const DeviceMesh& mesh(const ParallelismConfig& config, const GroupSettings& settings);
  /// The mesh if one was formed, else null.
  const DeviceMesh* existing_mesh() const;

  /// In a one-process job: a device group of this process alone, created on first use, for a
  /// sharded run's collectives (a one-process job shards only with CPU offload, to move the
  /// optimizer's side to the host). Its collectives copy nothing between processes.
  const c10::intrusive_ptr<c10d::ProcessGroup>& single_process_group(const GroupSettings& settings);

  /// The device for an Accelerator of this process: `cuda:LOCAL_RANK` when CUDA is available and
  /// `cpu` is false, else the CPU.
  torch::Device device(bool cpu) const;

 private:
  DistributedState(ProcessIdentity identity, const GroupSettings& settings);

  ProcessIdentity identity_;
  JobGroups groups_;
  c10::intrusive_ptr<c10d::Store> store_;  // the job's rendezvous, for the groups made later
  std::mutex hybrid_mutex_;
  std::optional<HybridGroups> hybrid_;
  c10::intrusive_ptr<c10d::ProcessGroup> single_;  // single_process_group()
  std::unique_ptr<DeviceMesh> mesh_;
};

}  // namespace distributed
}  // namespace accel
