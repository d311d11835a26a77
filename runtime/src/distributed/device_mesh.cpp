// The mesh's arithmetic and its groups: see device_mesh.h.

#include "device_mesh.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

namespace accel {
namespace distributed {

std::vector<MeshDim> dims_of(MeshGroup group) {
  switch (group) {
    case MeshGroup::dp_replicate:
      return {MeshDim::dp_replicate};
    case MeshGroup::cp:
      return {MeshDim::cp};
    case MeshGroup::tp:
      return {MeshDim::tp};
    case MeshGroup::data:
      return {MeshDim::dp_replicate, MeshDim::dp_shard};
    case MeshGroup::gradient:
      return {MeshDim::dp_replicate, MeshDim::dp_shard, MeshDim::cp};
    case MeshGroup::shard:
      return {MeshDim::dp_shard, MeshDim::cp};
    case MeshGroup::pp:
      return {MeshDim::pp};
  }
  return {};
}

const char* name_of(MeshGroup group) {
  switch (group) {
    case MeshGroup::dp_replicate:
      return "dp_replicate";
    case MeshGroup::cp:
      return "cp";
    case MeshGroup::tp:
      return "tp";
    case MeshGroup::data:
      return "dp";
    case MeshGroup::gradient:
      return "dp_cp";
    case MeshGroup::shard:
      return "dp_shard_cp";
    case MeshGroup::pp:
      return "pp";
  }
  return "?";
}

MeshLayout::MeshLayout(const ParallelismConfig& config)
    : sizes_{config.pp_size(), config.dp_replicate_size(), config.dp_shard_size(), config.cp_size(),
             config.tp_size()} {}

int64_t MeshLayout::world_size() const {
  int64_t size = 1;
  for (auto s : sizes_) size *= s;
  return size;
}

MeshCoordinates MeshLayout::coordinates(int64_t rank) const {
  MeshCoordinates at{};
  for (size_t d = sizes_.size(); d-- > 0;) {
    at[d] = rank % sizes_[d];
    rank /= sizes_[d];
  }
  return at;
}

int64_t MeshLayout::rank_of(const MeshCoordinates& coordinates) const {
  int64_t rank = 0;
  for (size_t d = 0; d < sizes_.size(); ++d) rank = rank * sizes_[d] + coordinates[d];
  return rank;
}

std::vector<int64_t> MeshLayout::group_ranks(int64_t rank, const std::vector<MeshDim>& dims) const {
  std::vector<int64_t> ranks{rank};
  for (MeshDim dim : dims) {
    std::vector<int64_t> spread;
    for (int64_t member : ranks) {
      auto at = coordinates(member);
      for (int64_t i = 0; i < size(dim); ++i) {
        at[static_cast<size_t>(dim)] = i;
        spread.push_back(rank_of(at));
      }
    }
    ranks = std::move(spread);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

int64_t MeshLayout::rank_in_group(int64_t rank, const std::vector<MeshDim>& dims) const {
  const auto ranks = group_ranks(rank, dims);
  return std::find(ranks.begin(), ranks.end(), rank) - ranks.begin();
}

std::string MeshLayout::group_key(int64_t rank, const std::vector<MeshDim>& dims) const {
  const auto at = coordinates(rank);
  std::string key;
  for (size_t d = 0; d < at.size(); ++d) {
    const bool spanned = std::find(dims.begin(), dims.end(), static_cast<MeshDim>(d)) != dims.end();
    key += (d == 0 ? "" : ".") + (spanned ? std::string("*") : std::to_string(at[d]));
  }
  return key;
}

DeviceMesh::DeviceMesh(const ParallelismConfig& config, int64_t rank,
                       const c10::intrusive_ptr<c10d::Store>& store, const GroupFactory& make_group)
    : config_(config), layout_(config), coordinates_(layout_.coordinates(rank)) {
  // Every process forms its groups in the same order, and the groups of one kind partition the
  // job, so each formation waits only for processes that are forming the same group.
  for (int g = 0; g < kMeshGroupCount; ++g) {
    const auto kind = static_cast<MeshGroup>(g);
    const auto dims = dims_of(kind);
    const auto members = layout_.group_ranks(rank, dims);
    const std::string key = std::string(name_of(kind)) + "/" + layout_.group_key(rank, dims);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("accel/mesh/" + key, store);
    try {
      groups_[static_cast<size_t>(g)] =
          make_group(prefixed, static_cast<int>(layout_.rank_in_group(rank, dims)),
                     static_cast<int>(members.size()), std::string(name_of(kind)) + "/");
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "accel: rank ", rank, " could not form the mesh's ", name_of(kind),
                  " group (", members.size(), " processes): ", e.what());
    }
  }
}

int64_t DeviceMesh::data_rank() const {
  return coordinate(MeshDim::dp_replicate) * config_.dp_shard_size() +
         coordinate(MeshDim::dp_shard);
}

}  // namespace distributed
}  // namespace accel
