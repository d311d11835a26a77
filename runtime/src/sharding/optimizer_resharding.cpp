#include "optimizer_resharding.h"

#include "optimizer_state_tensors.h"

#include <c10/util/Exception.h>
#include <torch/types.h>

#include <algorithm>
#include <map>
#include <unordered_set>
#include <utility>

namespace accel {
namespace detail {
namespace {

/// `length` elements that go from saved unit `saved_unit`'s slice (at `source` in it) to live unit
/// `live_unit`'s slice of this process (at `target`), in parameter group `group`.
struct Copy {
  size_t group = 0, live_unit = 0, saved_unit = 0;
  int64_t target = 0, source = 0, length = 0;
};

/// What each saved slice gives this process, by slice.
std::map<int64_t, std::vector<Copy>> plan(const OptimizerLayout& saved, const OptimizerLayout& live,
                                          int64_t rank, const std::string& where) {
  TORCH_CHECK(saved.groups.size() == live.groups.size(), "accel: ", where, " holds ",
              saved.groups.size(), " parameter groups and this run's optimizer has ",
              live.groups.size());
  std::map<int64_t, std::vector<Copy>> copies;
  for (size_t g = 0; g < live.groups.size(); ++g) {
    // Where each of the group's parameters is in the saved units.
    std::map<int64_t, std::pair<size_t, OptimizerLayout::Member>> saved_place;
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
        const auto& [saved_unit, saved_member] = found->second;
        TORCH_CHECK(saved_member.numel == member.numel, "accel: ", where, ": parameter ",
                    member.index, " of parameter group ", g, " has ", saved_member.numel,
                    " elements there and ", member.numel, " in this run");
        const int64_t first = std::max(member.offset, begin);
        const int64_t last = std::min(member.offset + member.numel, end);
        const int64_t slice = saved.groups[g][saved_unit].slice_elements;
        // [first, last) of the live unit is [from, to) of the saved one, cut at its slices.
        int64_t from = saved_member.offset + (first - member.offset);
        const int64_t to = saved_member.offset + (last - member.offset);
        int64_t target = first - begin;
        while (from < to) {
          const int64_t r = from / slice;
          const int64_t length = std::min((r + 1) * slice, to) - from;
          copies[r].push_back({g, u, saved_unit, target, from - r * slice, length});
          from += length;
          target += length;
        }
      }
    }
    TORCH_CHECK(live_members == saved_place.size(), "accel: ", where, " holds state for ",
                saved_place.size(), " parameters of parameter group ", g,
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
      for (const auto& m : unit.members) members.push_back({m.index, m.offset, m.numel});
      units.push_back(
          {{"members", members}, {"total", unit.total}, {"slice_elements", unit.slice_elements}});
    }
    described.push_back(units);
  }
  return {{"slices", slices}, {"groups", described}};
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
  for (const auto& group : json["groups"]) {
    if (!group.is_array()) fail("has a group that is not a list of units");
    auto& units = layout.groups.emplace_back();
    for (const auto& unit : group) {
      Unit parsed;
      try {
        parsed.total = unit.at("total").get<int64_t>();
        parsed.slice_elements = unit.at("slice_elements").get<int64_t>();
        for (const auto& m : unit.at("members")) {
          parsed.members.push_back(
              {m.at(0).get<int64_t>(), m.at(1).get<int64_t>(), m.at(2).get<int64_t>()});
        }
      } catch (const nlohmann::json::exception& e) {
        fail(std::string("has a malformed unit: ") + e.what());
      }
      if (parsed.slice_elements < 1 || parsed.slice_elements * layout.slices < parsed.total) {
        fail("has a unit of " + std::to_string(parsed.total) + " elements in slices of " +
             std::to_string(parsed.slice_elements));
      }
      for (const auto& m : parsed.members) {
        if (m.offset < 0 || m.numel < 0 || m.offset + m.numel > parsed.total || m.index < 0) {
          fail("has a member outside its unit");
        }
      }
      units.push_back(std::move(parsed));
    }
  }
  return layout;
}

OptimizerLayout layout_of(const torch::optim::Optimizer& optimizer,
                          const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                          int64_t* rank) {
  std::unordered_set<const c10::TensorImpl*> params;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) params.insert(p.unsafeGetTensorImpl());
  }
  OptimizerLayout layout;
  layout.groups.resize(optimizer.param_groups().size());
  if (rank != nullptr) *rank = 0;
  for (const auto& candidate : shards) {
    const auto units = candidate->unit_layouts();
    if (units.empty() || params.count(units.front().shard.unsafeGetTensorImpl()) == 0) continue;
    layout.slices = units.front().slices;
    if (rank != nullptr) *rank = units.front().rank;
    for (const auto& unit : units) {
      OptimizerLayout::Unit described;
      for (size_t i = 0; i < unit.params.size(); ++i) {
        described.members.push_back({unit.indices[i], unit.offsets[i], unit.params[i].numel()});
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
      layout.groups[g].push_back({{{static_cast<int64_t>(k), 0, numel}}, numel, numel});
    }
  }
  return layout;
}

std::vector<int64_t> slices_to_read(const OptimizerLayout& saved, const OptimizerLayout& live,
                                    int64_t rank, const std::string& where) {
  std::vector<int64_t> slices;
  for (const auto& entry : plan(saved, live, rank, where)) slices.push_back(entry.first);
  return slices;
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

/// Reads saved slice `slice` (through `read_slice`) and copies its elements `slice_copies` name
/// into `assembly`.
void assemble_slice(torch::optim::Optimizer& optimizer, const OptimizerLayout& saved, int64_t slice,
                    const std::vector<Copy>& slice_copies,
                    const std::function<void(int64_t)>& read_slice, const std::string& where,
                    Assembly& assembly) {
  auto& groups = optimizer.param_groups();
  auto& counters = assembly.counters;
  auto& assembled = assembly.assembled;
  // Stand-ins for the saved slice's parameters, for LibTorch's load to key the state by; the
  // live parameters wait in `live_params` meanwhile.
  std::vector<std::vector<torch::Tensor>> live_params(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t u = 0; u < saved.groups[g].size(); ++u) {
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
  read_slice(slice);
  auto& state = optimizer.state();
  for (const auto& copy : slice_copies) {
    const auto& stand_in = groups[copy.group].params()[copy.saved_unit];
    auto found = state.find(stand_in.unsafeGetTensorImpl());
    if (found == state.end()) continue;  // never stepped
    const auto& live_param = live_params[copy.group][copy.live_unit];
    auto& counter = counters[copy.group][copy.live_unit];
    if (!counter) counter = found->second->clone();
    auto& into = assembled[copy.group][copy.live_unit];
    const auto tensors = state_tensors(*found->second, where);
    into.resize(tensors.size());
    for (size_t j = 0; j < tensors.size(); ++j) {
      if (!tensors[j]->defined()) continue;
      if (!into[j].defined()) {
        into[j] =
            torch::zeros({live_param.numel()}, tensors[j]->options().device(live_param.device()));
      }
      into[j]
          .narrow(0, copy.target, copy.length)
          .copy_(tensors[j]->reshape(-1).narrow(0, copy.source, copy.length));
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
                  const OptimizerLayout& saved, const std::function<void(int64_t)>& read_slice,
                  const std::string& where) {
  const auto copies = plan(saved, live, rank, where);
  Assembly assembly(optimizer);
  torch::NoGradGuard no_grad;
  for (const auto& [slice, slice_copies] : copies) {
    assemble_slice(optimizer, saved, slice, slice_copies, read_slice, where, assembly);
  }
  install_assembly(optimizer, assembly, where);
}

std::optional<ResplitPlan> plan_resplit(const torch::optim::Optimizer& optimizer,
                                        const std::vector<std::shared_ptr<OptimizerShards>>& shards,
                                        const nlohmann::json& saved_layout, bool same_processes,
                                        const std::string& state_path, const std::string& where) {
  ResplitPlan plan;
  plan.live = layout_of(optimizer, shards, &plan.rank);
  plan.saved = OptimizerLayout::from_json(saved_layout, state_path);
  if (plan.saved == plan.live && same_processes) return std::nullopt;
  plan.slices = slices_to_read(plan.saved, plan.live, plan.rank, where);
  return plan;
}

}  // namespace detail
}  // namespace accel
