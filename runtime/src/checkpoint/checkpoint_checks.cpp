#include "checkpoint_checks.h"

#include "sharding/optimizer_resharding.h"

#include <c10/util/Exception.h>
#include <c10/util/Type.h>

namespace accel {
namespace checkpoints {

std::string optimizer_type(const torch::optim::Optimizer& optimizer) {
  std::string name = c10::demangle(typeid(optimizer).name());
  const std::string wrapper = "accel::AcceleratedOptimizer<";
  if (name.rfind(wrapper, 0) == 0 && name.back() == '>') {
    name = name.substr(wrapper.size(), name.size() - wrapper.size() - 1);
  }
  return name;
}

nlohmann::json describe_optimizers(
    const optim::OptimizerRegistry& optimizers,
    const std::vector<std::shared_ptr<sharding::OptimizerShards>>& shards, int64_t tp_size,
    const std::vector<sharding::GlobalIndex>* global_indices) {
  nlohmann::json described = nlohmann::json::array();
  for (size_t i = 0; i < optimizers.gates().size(); ++i) {
    auto* gate = optimizers.gates()[i];
    detail::OpenedGate open(*gate);
    const auto& optimizer = *gate->optimizer();
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& group : optimizer.param_groups()) groups.push_back(group.params().size());
    described.push_back(
        {{"type", optimizer_type(optimizer)},
         {"param_groups", groups},
         {"layout", sharding::layout_of(optimizer, shards, tp_size, nullptr,
                                        global_indices != nullptr ? global_indices->at(i) : nullptr)
                        .to_json()}});
  }
  return described;
}

nlohmann::json merge_stage_descriptions(const std::vector<std::string>& described, int64_t pp) {
  const auto per_stage = static_cast<int64_t>(described.size()) / pp;
  auto merged = nlohmann::json::parse(described.front());
  for (size_t i = 0; i < merged.size(); ++i) {
    auto& layout = merged[i]["layout"];
    layout["pp"] = pp;
    layout["per_stage"] = per_stage;
    auto& groups = layout["groups"];
    auto& counts = merged[i]["param_groups"];
    for (auto& units : groups) {
      for (auto& unit : units) unit["stage"] = 0;
    }
    for (int64_t stage = 1; stage < pp; ++stage) {
      const auto theirs =
          nlohmann::json::parse(described.at(static_cast<size_t>(stage * per_stage)));
      for (size_t g = 0; g < groups.size(); ++g) {
        for (auto unit : theirs.at(i).at("layout").at("groups").at(g)) {
          unit["stage"] = stage;
          groups[g].push_back(std::move(unit));
        }
        counts[g] = counts[g].get<int64_t>() + theirs.at(i).at("param_groups").at(g).get<int64_t>();
      }
    }
  }
  return merged;
}

void check_optimizers(const nlohmann::json& saved, const nlohmann::json& run,
                      const std::string& state_path,
                      const std::function<std::string(size_t)>& file_of, bool same_layout) {
  if (!saved.is_array()) return;  // written before the summary described them
  for (size_t i = 0; i < saved.size() && i < run.size(); ++i) {
    const auto file = file_of(i);
    const std::string saved_type = saved[i].value("type", "");
    TORCH_CHECK(saved_type == run[i]["type"].get<std::string>(), "accel: ", state_path, ": ", file,
                " holds the state of a ", saved_type, " and this run's optimizer ", i, " is a ",
                run[i]["type"].get<std::string>());
    const auto saved_groups = saved[i].value("param_groups", nlohmann::json::array());
    const auto& groups = run[i]["param_groups"];
    TORCH_CHECK(saved_groups.size() == groups.size(), "accel: ", state_path, ": ", file, " holds ",
                saved_groups.size(), " parameter groups and this run's optimizer ", i, " has ",
                groups.size());
    for (size_t g = 0; g < groups.size() && same_layout; ++g) {
      TORCH_CHECK(saved_groups[g] == groups[g], "accel: ", state_path, ": ", file,
                  "'s parameter group ", g, " holds ", saved_groups[g].dump(),
                  " parameters and this run's has ", groups[g].dump());
    }
  }
}

void check_accumulation(const nlohmann::json& summary, const std::string& state_path,
                        int64_t saved_processes, bool window, const LoadStateOptions& options,
                        int64_t processes, int64_t steps) {
  TORCH_CHECK(!window || saved_processes == processes, "accel: ", state_path,
              " was taken inside a gradient accumulation window (micro-step ",
              summary.value("micro_step", int64_t{0}), ") by ", saved_processes,
              " processes, and a window's gradients are each process's own: resume it on ",
              saved_processes, " processes, or from a checkpoint taken on a synchronising step");
  if (!summary.contains("gradient_accumulation_steps")) return;
  const auto saved = summary["gradient_accumulation_steps"].get<int64_t>();
  if (saved == steps) return;
  TORCH_CHECK(!window && saved_processes != processes && options.allow_process_count_change(),
              "accel: ", state_path, " was saved with gradient_accumulation_steps ", saved,
              " and this run has ", steps,
              "; resume with the same setting (another one is taken only between windows, with "
              "allow_process_count_change, on another process count)");
}

}  // namespace checkpoints
}  // namespace accel
