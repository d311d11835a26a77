// Cutting a Sequential into stages: see pipeline_cut.h.

#include "pipeline_cut.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>

namespace accel {
namespace parallel {

namespace {

std::string listed(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < 12; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > 12) text += ", ...";
  return text;
}

/// The contiguous cut whose largest stage holds the fewest parameters (a small dynamic program:
/// best[k][i] is the least largest stage when k stages hold the first i children).
std::vector<size_t> balanced_cut(const std::vector<int64_t>& parameters, size_t stages) {
  const size_t n = parameters.size();
  std::vector<int64_t> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + parameters[i];
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(n + 1, kNone));
  std::vector<std::vector<size_t>> start(stages + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t k = 1; k <= stages; ++k) {
    for (size_t i = k; i <= n; ++i) {
      for (size_t first = k - 1; first < i; ++first) {
        if (best[k - 1][first] == kNone) continue;
        const int64_t largest = std::max(best[k - 1][first], prefix[i] - prefix[first]);
        if (largest < best[k][i]) {
          best[k][i] = largest;
          start[k][i] = first;
        }
      }
    }
  }
  std::vector<size_t> starts(stages);
  for (size_t k = stages, i = n; k > 0; --k) {
    starts[k - 1] = start[k][i];
    i = start[k][i];
  }
  return starts;
}

}  // namespace

std::vector<size_t> cut_stages(const std::vector<std::string>& names,
                               const std::vector<int64_t>& parameters, int64_t stages,
                               const std::vector<std::string>& split_before,
                               const std::string& layout) {
  TORCH_CHECK(stages <= static_cast<int64_t>(names.size()), "accel: prepare_pipeline cuts the ",
              "model into ", stages, " stages (", layout, "), and the Sequential has ",
              names.size(), " children (", listed(names),
              "); each stage needs at least one: use fewer stages or a finer Sequential");
  if (split_before.empty()) return balanced_cut(parameters, static_cast<size_t>(stages));
  TORCH_CHECK(static_cast<int64_t>(split_before.size()) == stages - 1,
              "accel: PipelineOptions::split_before names ", split_before.size(), " children, and ",
              stages, " stages (", layout, ") start at ", stages - 1, " children after the first");
  std::vector<size_t> starts{0};
  for (const auto& name : split_before) {
    const auto found = std::find(names.begin(), names.end(), name);
    TORCH_CHECK(found != names.end(), "accel: PipelineOptions::split_before names '", name,
                "', which is no child of the Sequential (its children: ", listed(names), ")");
    const auto index = static_cast<size_t>(found - names.begin());
    TORCH_CHECK(index > starts.back(), "accel: PipelineOptions::split_before names '", name,
                "' where a stage would hold no child: its names must be in the Sequential's "
                "order, after the first child (",
                names.front(), "), each once");
    starts.push_back(index);
  }
  return starts;
}

}  // namespace parallel
}  // namespace accel
