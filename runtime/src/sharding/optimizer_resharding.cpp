#include "optimizer_resharding.h"

#include "optimizer_state_tensors.h"
#include "parallel/tensor_parallel.h"

#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <torch/types.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <unordered_set>
#include <utility>

namespace accel {
namespace sharding {
namespace {

using Member = OptimizerLayout::Member;

/// The whole parameter's shape, from a slice of it cut into `parts`.
std::vector<int64_t> whole_shape(const Member& member, int64_t parts) {
  auto shape = member.shape;
  if (member.cut_dim >= 0) shape[static_cast<size_t>(member.cut_dim)] *= parts;
  return shape;
}

int64_t elements_after(const std::vector<int64_t>& shape, int64_t dim) {
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  return inner;
}

/// The whole tensor's flat indices of `local`, flat indices into part `part` of it, cut along
/// `dim` into `parts` (-1: not cut).
torch::Tensor whole_indices(const torch::Tensor& local, const std::vector<int64_t>& whole,
                            int64_t dim, int64_t parts, int64_t part) {
  if (dim < 0) return local;
  const int64_t inner = elements_after(whole, dim);
  const int64_t chunk = whole[static_cast<size_t>(dim)] / parts;
  const auto outer = local.div(chunk * inner, "trunc");
  const auto rest = local.remainder(chunk * inner);
  return outer * (whole[static_cast<size_t>(dim)] * inner) +
         (rest.div(inner, "trunc") + part * chunk) * inner + rest.remainder(inner);
}

/// For whole flat indices `whole_index`: the part of a cut along `dim` into `parts` that holds
/// each (`uncut_part` where `dim` is -1), and the flat index there.
std::pair<torch::Tensor, torch::Tensor> part_indices(const torch::Tensor& whole_index,
                                                     const std::vector<int64_t>& whole, int64_t dim,
                                                     int64_t parts, int64_t uncut_part) {
  if (dim < 0) return {torch::full_like(whole_index, uncut_part), whole_index};
  const int64_t inner = elements_after(whole, dim);
  const int64_t size = whole[static_cast<size_t>(dim)], chunk = size / parts;
  const auto outer = whole_index.div(size * inner, "trunc");
  const auto rest = whole_index.remainder(size * inner);
  const auto coordinate = rest.div(inner, "trunc");
  return {coordinate.div(chunk, "trunc"),
          outer * (chunk * inner) + coordinate.remainder(chunk) * inner + rest.remainder(inner)};
}

/// A parameter cut otherwise than saved: where each of its elements in this process's slice
/// of the unit, [first, last), comes from, found through its place in the whole tensor.
struct Scattered {
  Member member, saved_member;
  std::vector<int64_t> whole;
  int64_t live_tp = 1, saved_tp = 1, part = 0, uncut_part = 0;
  int64_t first = 0, last = 0, begin = 0, saved_slice_elements = 1;
  int64_t file_offset = 0;  // the first process of the saved unit's stage

  /// For each element: the saved process whose file holds it, its place in this process's
  /// slice of the live unit, and in that file's slice of the saved unit.
  std::array<torch::Tensor, 3> locate() const {
    const auto local = torch::arange(first - member.offset, last - member.offset, torch::kInt64);
    const auto [file_part, index] =
        part_indices(whole_indices(local, whole, member.cut_dim, live_tp, part), whole,
                     saved_member.cut_dim, saved_tp, uncut_part);
    const auto position = index + saved_member.offset;
    const auto slice = position.div(saved_slice_elements, "trunc");
    return {file_offset + slice * saved_tp + file_part, local + (member.offset - begin),
            position - slice * saved_slice_elements};
  }
};

/// Elements that go from saved unit `saved_unit`'s slice to live unit `live_unit`'s slice of this
/// process, in parameter group `group`: `length` of them from `source` to `target`, or those of
/// `scattered` that saved process `file` holds. The scattered elements' places are found again
/// when the file is read, not kept: they would take 16 bytes per element for the whole load.
struct Copy {
  size_t group = 0, live_unit = 0, saved_unit = 0;
  int64_t target = 0, source = 0, length = 0;
  std::shared_ptr<const Scattered> scattered;
  int64_t file = 0;
};

/// One live member's elements [first, last) of its unit (this process's slice starts at
/// `begin`), taken from the saved member: by ranges where both are cut alike, else element by
/// element through the whole tensor.
class MemberPlan {
 public:
  MemberPlan(const OptimizerLayout& saved, const OptimizerLayout& live, int64_t part,
             const std::string& where)
      : saved_(saved), live_(live), part_(part), where_(where) {}

  /// The saved member holds the same parameter (alike on every process: checked whether or not
  /// this process holds any of it, so that all refuse together).
  void check(size_t g, const Member& member, const Member& saved_member) const {
    const auto whole = whole_of(member, saved_member);
    const auto saved_whole = whole_of(saved_member, member, /*saved=*/true);
    TORCH_CHECK(
        whole == saved_whole && whole_numel(member, live_) == whole_numel(saved_member, saved_) &&
            c10::multiply_integers(whole) == whole_numel(member, live_),
        "accel: ", where_, ": parameter ", member.index, " of parameter group ", g, " is of shape ",
        c10::IntArrayRef(saved_whole), " there (", saved_member.numel, " elements in each of ",
        saved_member.cut_dim >= 0 ? saved_.tp : 1, " parts) and ", c10::IntArrayRef(whole),
        " in this run (", member.numel, " in each of ", member.cut_dim >= 0 ? live_.tp : 1, ")");
  }

  /// The copies of the live member's elements [first, last) of its unit (this process's slice
  /// of the unit starts at `begin`), by the saved process whose file holds them.
  void add(size_t g, size_t u, size_t saved_unit, const Member& member, const Member& saved_member,
           int64_t first, int64_t last, int64_t begin,
           std::map<int64_t, std::vector<Copy>>& copies) const {
    const int64_t slice = saved_.groups[g][saved_unit].slice_elements;
    const int64_t stage = saved_.groups[g][saved_unit].stage;
    // A parameter held whole is the same on every part: read from this process's part's files
    // where the checkpoint has them.
    const int64_t uncut_part = part_ < saved_.tp ? part_ : 0;
    if (alike(member, saved_member)) {
      const int64_t file_part = member.cut_dim >= 0 ? part_ : uncut_part;
      // [first, last) of the live unit is [from, to) of the saved one, cut at its slices.
      int64_t from = saved_member.offset + (first - member.offset);
      const int64_t to = saved_member.offset + (last - member.offset);
      int64_t target = first - begin;
      while (from < to) {
        const int64_t r = from / slice;
        const int64_t length = std::min((r + 1) * slice, to) - from;
        copies[saved_.file_of(stage, r, file_part)].push_back(
            {g, u, saved_unit, target, from - r * slice, length, nullptr, 0});
        from += length;
        target += length;
      }
      return;
    }
    // Element by element: each one's place in the whole tensor, then in the saved part.
    auto scattered = std::make_shared<const Scattered>(
        Scattered{member, saved_member, whole_of(member, saved_member), live_.tp, saved_.tp, part_,
                  uncut_part, first, last, begin, slice, saved_.file_of(stage, 0, 0)});
    const auto files = std::get<0>(at::_unique(scattered->locate()[0], /*sorted=*/true));
    const auto* listed = files.data_ptr<int64_t>();
    for (int64_t i = 0; i < files.numel(); ++i) {
      copies[listed[i]].push_back({g, u, saved_unit, 0, 0, 0, scattered, listed[i]});
    }
  }

 private:
  /// Both cut alike: the same elements in the same order.
  bool alike(const Member& member, const Member& saved_member) const {
    return member.cut_dim == saved_member.cut_dim &&
           (member.cut_dim < 0 || (saved_.tp == live_.tp && member.shape == saved_member.shape));
  }
  static int64_t whole_numel(const Member& member, const OptimizerLayout& layout) {
    return member.numel * (member.cut_dim >= 0 ? layout.tp : 1);
  }
  /// The whole parameter's shape, as `member` (live, or `saved`) records it; from `other` where
  /// it records none (a layout saved before shapes were: never cut).
  std::vector<int64_t> whole_of(const Member& member, const Member& other,
                                bool saved = false) const {
    if (member.shape.empty()) {
      return other.shape.empty() ? std::vector<int64_t>{member.numel}
                                 : whole_shape(other, saved ? live_.tp : saved_.tp);
    }
    return whole_shape(member, saved ? saved_.tp : live_.tp);
  }

  const OptimizerLayout& saved_;
  const OptimizerLayout& live_;
  int64_t part_;
  const std::string& where_;
};

/// What each saved process's file gives this process, by the file's process.
std::map<int64_t, std::vector<Copy>> plan(const OptimizerLayout& saved, const OptimizerLayout& live,
                                          int64_t rank, int64_t part, const std::string& where) {
  TORCH_CHECK(saved.groups.size() == live.groups.size(), "accel: ", where, " holds ",
              saved.groups.size(), " parameter groups and this run's optimizer has ",
              live.groups.size());
  const MemberPlan member_plan(saved, live, part, where);
  std::map<int64_t, std::vector<Copy>> copies;
  for (size_t g = 0; g < live.groups.size(); ++g) {
    // Where each of the group's parameters is in the saved units.
    std::map<int64_t, std::pair<size_t, Member>> saved_place;
    for (size_t u = 0; u < saved.groups[g].size(); ++u) {
      for (const auto& member : saved.groups[g][u].members) {
        saved_place[member.index] = {u, member};
      }
    }
    size_t live_members = 0;
    for (size_t u = 0; u < live.groups[g].size(); ++u) {
      const auto& unit = live.groups[g][u];
      const int64_t begin = rank * unit.slice_elements;
      const int64_t end = std::min(begin + unit.slice_elements, unit.total);
      for (const auto& member : unit.members) {
        ++live_members;
        auto found = saved_place.find(member.index);
        TORCH_CHECK(found != saved_place.end(), "accel: ", where, " has no state for parameter ",
                    member.index, " of parameter group ", g);
        member_plan.check(g, member, found->second.second);
        const int64_t first = std::max(member.offset, begin);
        const int64_t last = std::min(member.offset + member.numel, end);
        if (first >= last) continue;
        member_plan.add(g, u, found->second.first, member, found->second.second, first, last, begin,
                        copies);
      }
    }
    // A pipeline stage holds some of the group's parameters (each found above).
    TORCH_CHECK(live.pp > 1 || live_members == saved_place.size(), "accel: ", where,
                " holds state for ", saved_place.size(), " parameters of parameter group ", g,
                " and this run's group has ", live_members);
  }
  return copies;
}

std::vector<torch::Tensor*> state_tensors(torch::optim::OptimizerParamState& state,
                                          const std::string& where) {
  auto tensors = elementwise_state(state);
  TORCH_CHECK(tensors.has_value(), "accel: ", where,
              ": optimizer state can be re-split for SGD, Adam, AdamW, Adagrad and RMSprop only; "
              "resume this optimizer with the saved strategy and process count");
  return *tensors;
}

}  // namespace

nlohmann::json OptimizerLayout::to_json() const {
  nlohmann::json described = nlohmann::json::array();
  for (const auto& group : groups) {
    nlohmann::json units = nlohmann::json::array();
    for (const auto& unit : group) {
      nlohmann::json members = nlohmann::json::array();
      for (const auto& m : unit.members) {
        members.push_back({m.index, m.offset, m.numel, m.cut_dim, m.shape});
      }
      nlohmann::json described_unit = {
          {"members", members}, {"total", unit.total}, {"slice_elements", unit.slice_elements}};
      if (pp > 1) described_unit["stage"] = unit.stage;
      units.push_back(std::move(described_unit));
    }
    described.push_back(units);
  }
  nlohmann::json json = {{"slices", slices}, {"tp", tp}, {"groups", described}};
  if (pp > 1) {
    json["pp"] = pp;
    json["per_stage"] = per_stage;
  }
  return json;
}

OptimizerLayout OptimizerLayout::from_json(const nlohmann::json& json, const std::string& where) {
  auto fail = [&where](const std::string& what) {
    TORCH_CHECK(false, "accel: ", where, ": the optimizer layout ", what);
  };
  if (!json.is_object() || !json.contains("slices") || !json["slices"].is_number_integer() ||
      !json.contains("groups") || !json["groups"].is_array()) {
    fail("has no integer 'slices' and list 'groups'");
  }
  OptimizerLayout layout;
  layout.slices = json["slices"].get<int64_t>();
  if (layout.slices < 1) fail("has " + std::to_string(layout.slices) + " slices");
  const auto tp = json.find("tp");
  if (tp != json.end()) {
    if (!tp->is_number_integer() || tp->get<int64_t>() < 1) fail("has a malformed 'tp'");
    layout.tp = tp->get<int64_t>();
  }
  for (const auto& [key, field] :
       {std::pair<const char*, int64_t*>{"pp", &layout.pp},
        std::pair<const char*, int64_t*>{"per_stage", &layout.per_stage}}) {
    const auto found = json.find(key);
    if (found == json.end()) continue;
    if (!found->is_number_integer() || found->get<int64_t>() < 1) {
      fail(std::string("has a malformed '") + key + "'");
    }
    *field = found->get<int64_t>();
  }
  for (const auto& group : json["groups"]) {
    if (!group.is_array()) fail("has a group that is not a list of units");
    auto& units = layout.groups.emplace_back();
    for (const auto& unit : group) {
      Unit parsed;
      try {
        parsed.total = unit.at("total").get<int64_t>();
        parsed.slice_elements = unit.at("slice_elements").get<int64_t>();
        parsed.stage = unit.value("stage", int64_t{0});
        for (const auto& m : unit.at("members")) {
          Member member{
              m.at(0).get<int64_t>(), m.at(1).get<int64_t>(), m.at(2).get<int64_t>(), -1, {}};
          if (m.size() > 3) {
            member.cut_dim = m.at(3).get<int64_t>();
            member.shape = m.at(4).get<std::vector<int64_t>>();
          }
          parsed.members.push_back(std::move(member));
        }
      } catch (const nlohmann::json::exception& e) {
        fail(std::string("has a malformed unit: ") + e.what());
      }
      if (parsed.stage < 0 || parsed.stage >= layout.pp) {
        fail("has a unit of stage " + std::to_string(parsed.stage) + " of " +
             std::to_string(layout.pp));
      }
      if (parsed.slice_elements < 1 || parsed.slice_elements * layout.slices < parsed.total) {
        fail("has a unit of " + std::to_string(parsed.total) + " elements in slices of " +
             std::to_string(parsed.slice_elements));
      }
      for (const auto& m : parsed.members) {
        if (m.offset < 0 || m.numel < 0 || m.offset + m.numel > parsed.total || m.index < 0) {
          fail("has a member outside its unit");
        }
        const bool shaped = !m.shape.empty();
        if ((shaped &&
             (c10::multiply_integers(m.shape) != m.numel ||
              std::any_of(m.shape.begin(), m.shape.end(), [](int64_t d) { return d < 0; }))) ||
            m.cut_dim < -1 ||
            (m.cut_dim >= 0 && m.cut_dim >= static_cast<int64_t>(m.shape.size()))) {
          fail("has a member whose cut does not match its size");
        }
      }
      units.push_back(std::move(parsed));
    }
  }
  return layout;
}

namespace {

/// A group parameter's entry: where it is in its unit and, for a tensor-parallel slice, how it
/// is cut.
Member member_of(const at::Tensor& param, int64_t index, int64_t offset) {
  Member member{index, offset, param.numel(), -1, param.sizes().vec()};
  if (parallel::is_tensor_parallel_slice(param)) member.cut_dim = parallel::tp_slice_of(param)->dim;
  return member;
}

/// The unit layouts of the one of `shards` whose shards are `optimizer`'s parameters; empty when
/// none is (the optimizer is not sharded).
std::vector<OptimizerShards::UnitLayout> sharded_units(
    const torch::optim::Optimizer& optimizer,
    const std::vector<std::shared_ptr<OptimizerShards>>& shards) {
  std::unordered_set<const c10::TensorImpl*> params;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) params.insert(p.unsafeGetTensorImpl());
  }
  for (const auto& candidate : shards) {
    auto units = candidate->unit_layouts();
    if (!units.empty() && params.count(units.front().shard.unsafeGetTensorImpl()) > 0) {
      return units;
    }
  }
  return {};
}

}  // namespace

OptimizerLayout layout_of(const torch::optim::Optimizer& optimizer,
                          const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                          int64_t tp_size, int64_t* rank, const GlobalIndex& global_index) {
  auto numbered = [&](size_t group, int64_t index) {
    return global_index ? global_index(group, index) : index;
  };
  OptimizerLayout layout;
  layout.tp = tp_size;
  layout.groups.resize(optimizer.param_groups().size());
  if (rank != nullptr) *rank = 0;
  const auto units = sharded_units(optimizer, shards);
  if (!units.empty()) {
    layout.slices = units.front().slices;
    if (rank != nullptr) *rank = units.front().rank;
    for (const auto& unit : units) {
      OptimizerLayout::Unit described;
      for (size_t i = 0; i < unit.params.size(); ++i) {
        described.members.push_back(
            member_of(unit.params[i], numbered(static_cast<size_t>(unit.group), unit.indices[i]),
                      unit.offsets[i]));
      }
      described.total = unit.total;
      described.slice_elements = unit.shard.numel();
      layout.groups.at(static_cast<size_t>(unit.group)).push_back(std::move(described));
    }
    return layout;
  }
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& group_params = optimizer.param_groups()[g].params();
    for (size_t k = 0; k < group_params.size(); ++k) {
      const int64_t numel = group_params[k].numel();
      layout.groups[g].push_back(
          {{member_of(group_params[k], numbered(g, static_cast<int64_t>(k)), 0)}, numel, numel});
    }
  }
  return layout;
}

std::vector<std::vector<at::Tensor>> built_parameters(
    const torch::optim::Optimizer& optimizer,
    const std::vector<std::shared_ptr<OptimizerShards>>& shards) {
  std::vector<std::vector<at::Tensor>> built(optimizer.param_groups().size());
  const auto units = sharded_units(optimizer, shards);
  if (units.empty()) {
    for (size_t g = 0; g < built.size(); ++g) built[g] = optimizer.param_groups()[g].params();
    return built;
  }
  for (const auto& unit : units) {
    auto& group = built.at(static_cast<size_t>(unit.group));
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const auto index = static_cast<size_t>(unit.indices[i]);
      if (group.size() <= index) group.resize(index + 1);
      group[index] = unit.params[i];
    }
  }
  return built;
}

std::vector<int64_t> files_to_read(const OptimizerLayout& saved, const OptimizerLayout& live,
                                   int64_t rank, int64_t part, const std::string& where) {
  std::vector<int64_t> files;
  for (const auto& entry : plan(saved, live, rank, part, where)) files.push_back(entry.first);
  return files;
}

namespace {

/// What load_resplit has gathered so far, per live parameter of each group: a saved state to take
/// the counters (Adam's step) from, and the per-element tensors assembled (undefined: none saved).
struct Assembly {
  std::vector<std::vector<std::unique_ptr<torch::optim::OptimizerParamState>>> counters;
  std::vector<std::vector<std::vector<torch::Tensor>>> assembled;

  explicit Assembly(const torch::optim::Optimizer& optimizer) {
    const auto& groups = optimizer.param_groups();
    counters.resize(groups.size());
    assembled.resize(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      counters[g].resize(groups[g].params().size());
      assembled[g].resize(groups[g].params().size());
    }
  }
};

/// Reads saved process `file`'s state (through `read_file`) and copies the elements
/// `file_copies` name into `assembly`.
void assemble_file(torch::optim::Optimizer& optimizer, const OptimizerLayout& saved, int64_t file,
                   const std::vector<Copy>& file_copies,
                   const std::function<void(int64_t)>& read_file, const std::string& where,
                   Assembly& assembly) {
  auto& groups = optimizer.param_groups();
  auto& counters = assembly.counters;
  auto& assembled = assembly.assembled;
  // Stand-ins for the saved file's parameters, for LibTorch's load to key the state by; the
  // live parameters wait in `live_params` meanwhile.
  // A pipeline's file holds its stage's units only: the stand-ins are theirs, from `first_unit`.
  const int64_t stage = saved.pp > 1 ? file / saved.per_stage : 0;
  std::vector<size_t> first_unit(groups.size(), 0);
  std::vector<std::vector<torch::Tensor>> live_params(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    bool found = false;
    for (size_t u = 0; u < saved.groups[g].size(); ++u) {
      if (saved.groups[g][u].stage != stage) continue;
      if (!found) first_unit[g] = u;
      found = true;
      live_params[g].push_back(torch::empty({0}));
    }
    std::swap(groups[g].params(), live_params[g]);
  }
  struct PutBack {
    torch::optim::Optimizer& optimizer;
    std::vector<std::vector<torch::Tensor>>& live_params;
    ~PutBack() {
      auto& groups = optimizer.param_groups();
      for (size_t g = 0; g < groups.size(); ++g) {
        for (const auto& stand_in : groups[g].params()) {
          optimizer.state().erase(stand_in.unsafeGetTensorImpl());
        }
        std::swap(groups[g].params(), live_params[g]);
      }
    }
  } put_back{optimizer, live_params};
  read_file(file);
  auto& state = optimizer.state();
  for (const auto& copy : file_copies) {
    const auto& stand_in = groups[copy.group].params()[copy.saved_unit - first_unit[copy.group]];
    auto found = state.find(stand_in.unsafeGetTensorImpl());
    if (found == state.end()) continue;  // never stepped
    const auto& live_param = live_params[copy.group][copy.live_unit];
    auto& counter = counters[copy.group][copy.live_unit];
    if (!counter) counter = found->second->clone();
    auto& into = assembled[copy.group][copy.live_unit];
    const auto tensors = state_tensors(*found->second, where);
    into.resize(tensors.size());
    // A scattered copy's elements in this file: their places, for every state tensor.
    torch::Tensor targets, sources;
    if (copy.scattered) {
      const auto [file, all_targets, all_sources] = copy.scattered->locate();
      const auto in_file = file.eq(copy.file);
      targets = all_targets.masked_select(in_file);
      sources = all_sources.masked_select(in_file);
    }
    for (size_t j = 0; j < tensors.size(); ++j) {
      if (!tensors[j]->defined()) continue;
      if (!into[j].defined()) {
        into[j] =
            torch::zeros({live_param.numel()}, tensors[j]->options().device(live_param.device()));
      }
      const auto saved_values = tensors[j]->reshape(-1);
      if (copy.scattered) {
        const auto device = into[j].device();
        into[j].index_copy_(
            0, targets.to(device),
            saved_values.index_select(0, sources.to(saved_values.device())).to(device));
      } else {
        into[j]
            .narrow(0, copy.target, copy.length)
            .copy_(saved_values.narrow(0, copy.source, copy.length));
      }
    }
  }
}

/// Each live parameter's state: the saved counters with the assembled tensors. A slice that holds
/// only padding gets the counters of its group and zeros, as the uninterrupted run has.
void install_assembly(torch::optim::Optimizer& optimizer, Assembly& assembly,
                      const std::string& where) {
  auto& groups = optimizer.param_groups();
  auto& counters = assembly.counters;
  auto& assembled = assembly.assembled;
  auto& state = optimizer.state();
  for (size_t g = 0; g < groups.size(); ++g) {
    torch::optim::OptimizerParamState* group_counter = nullptr;
    for (const auto& counter : counters[g]) {
      if (counter) group_counter = counter.get();
    }
    for (size_t k = 0; k < groups[g].params().size(); ++k) {
      const auto& param = groups[g].params()[k];
      auto key = param.unsafeGetTensorImpl();
      auto* counter = counters[g][k] ? counters[g][k].get() : group_counter;
      if (counter == nullptr) {
        state.erase(key);
        continue;
      }
      auto restored = counter->clone();
      auto tensors = state_tensors(*restored, where);
      const auto counter_tensors = state_tensors(*counter, where);
      auto& into = assembled[g][k];
      for (size_t j = 0; j < tensors.size(); ++j) {
        torch::Tensor value = j < into.size() ? into[j] : torch::Tensor();
        if (!value.defined() && counter_tensors[j]->defined()) {
          value =
              torch::zeros({param.numel()}, counter_tensors[j]->options().device(param.device()));
        }
        *tensors[j] = value.defined() ? value.view(param.sizes()) : torch::Tensor();
      }
      state[key] = std::move(restored);
    }
  }
}

}  // namespace

void load_resplit(torch::optim::Optimizer& optimizer, const OptimizerLayout& live, int64_t rank,
                  int64_t part, const OptimizerLayout& saved,
                  const std::function<void(int64_t)>& read_file, const std::string& where) {
  const auto copies = plan(saved, live, rank, part, where);
  Assembly assembly(optimizer);
  torch::NoGradGuard no_grad;
  for (const auto& [file, file_copies] : copies) {
    assemble_file(optimizer, saved, file, file_copies, read_file, where, assembly);
  }
  install_assembly(optimizer, assembly, where);
}

std::optional<ResplitPlan> plan_resplit(const torch::optim::Optimizer& optimizer,
                                        const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                                        TpPart tp, const nlohmann::json& saved_layout,
                                        bool same_processes, const std::string& state_path,
                                        const std::string& where, const GlobalIndex& global_index,
                                        int64_t pp) {
  ResplitPlan plan;
  plan.live = layout_of(optimizer, shards, tp.size, &plan.rank, global_index);
  // A stage's live layout holds its own units, numbered in the whole model's groups.
  plan.live.pp = pp;
  plan.part = tp.rank;
  plan.saved = OptimizerLayout::from_json(saved_layout, state_path);
  if (plan.saved == plan.live && same_processes && !global_index) return std::nullopt;
  plan.files = files_to_read(plan.saved, plan.live, plan.rank, plan.part, where);
  return plan;
}

}  // namespace sharding
}  // namespace accel
