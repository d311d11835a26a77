#pragma once

// The job's processes laid out as a mesh (accel/parallelism.h) and the c10d groups along its
// dimensions, made once per process. The order is torchtitan's (pp, dp_replicate, dp_shard, cp,
// tp: Accelerate's four with the pipeline outermost), so
// rank = (((stage * dp_replicate + replicate) * dp_shard + shard) * cp + context) * tp + tensor.

#include <accel/parallelism.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace accel {
namespace distributed {

/// One dimension of the mesh, in the mesh's order.
enum class MeshDim { pp = 0, dp_replicate = 1, dp_shard = 2, cp = 3, tp = 4 };
inline constexpr size_t kMeshDims = 5;
using MeshCoordinates = std::array<int64_t, kMeshDims>;

/// The groups the runtime uses: one per dimension, and the combinations it needs.
enum class MeshGroup {
  dp_replicate,  ///< HYBRID_SHARD's replicas
  cp,            ///< a ring of context-parallel processes
  tp,            ///< a tensor-parallel group
  data,          ///< dp_replicate × dp_shard: one process of each data rank (metrics, loaders)
  gradient,      ///< dp_replicate × dp_shard × cp: where gradients average (FSDP's dp_cp)
  shard,         ///< dp_shard × cp: where parameters are sharded (FSDP's dp_shard_cp)
  pp,            ///< one process of each pipeline stage: activations travel along it
};
inline constexpr int kMeshGroupCount = 7;

/// The dimensions a group spans, and its name (for the flight recorder and messages).
std::vector<MeshDim> dims_of(MeshGroup group);
const char* name_of(MeshGroup group);

/// Pure arithmetic over the mesh's shape: a rank's coordinates and the ranks of its groups.
class MeshLayout {
 public:
  explicit MeshLayout(const ParallelismConfig& config);
  int64_t size(MeshDim dim) const { return sizes_[static_cast<size_t>(dim)]; }
  int64_t world_size() const;
  /// `rank`'s coordinate along each dimension, in the mesh's order.
  MeshCoordinates coordinates(int64_t rank) const;
  int64_t rank_of(const MeshCoordinates& coordinates) const;
  /// The ranks of `rank`'s group over `dims` (the other coordinates fixed), in rank order.
  std::vector<int64_t> group_ranks(int64_t rank, const std::vector<MeshDim>& dims) const;
  /// `rank`'s position in that group.
  int64_t rank_in_group(int64_t rank, const std::vector<MeshDim>& dims) const;
  /// A name for `rank`'s group over `dims` that every member gives alike: the fixed coordinates.
  std::string group_key(int64_t rank, const std::vector<MeshDim>& dims) const;

 private:
  MeshCoordinates sizes_;
};

/// This process's groups over the mesh.
class DeviceMesh {
 public:
  /// Makes a group: over `store` (already prefixed with the group's key), of `size` processes
  /// of which this is `rank`; `name` labels its collectives.
  using GroupFactory = std::function<c10::intrusive_ptr<c10d::ProcessGroup>(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const std::string& name)>;

  /// Forms every group of this process. Collective: every process of the job calls it at the
  /// same point with the same config.
  DeviceMesh(const ParallelismConfig& config, int64_t rank,
             const c10::intrusive_ptr<c10d::Store>& store, const GroupFactory& make_group);

  const ParallelismConfig& config() const { return config_; }
  const MeshLayout& layout() const { return layout_; }
  /// This process's coordinate along `dim`.
  int64_t coordinate(MeshDim dim) const { return coordinates_[static_cast<size_t>(dim)]; }
  /// This process's data rank: which batches it reads, shared by its tp and cp processes.
  int64_t data_rank() const;
  const c10::intrusive_ptr<c10d::ProcessGroup>& group(MeshGroup group) const {
    return groups_[static_cast<size_t>(group)];
  }

 private:
  ParallelismConfig config_;
  MeshLayout layout_;
  MeshCoordinates coordinates_;
  std::array<c10::intrusive_ptr<c10d::ProcessGroup>, kMeshGroupCount> groups_;
};

}  // namespace distributed
}  // namespace accel
