#pragma once

// Where a Sequential is cut into pipeline stages: between its children, before those the program
// names, or so that the stages hold as equal numbers of parameters as contiguous runs of children
// allow. Pure arithmetic over the children's names and sizes; refusals name the values.

#include <cstdint>
#include <string>
#include <vector>

namespace accel {
namespace parallel {

/// The first child of each of `stages` stages (stage k holds children [starts[k], starts[k+1])).
/// `names` and `parameters`: the children's names and parameter counts, in order; `split_before`:
/// the names starting stages 1.. (empty: cut by parameter count); `layout`: how the stage count
/// came about, for messages ("pp_size 2 x stages_per_process 1").
std::vector<size_t> cut_stages(const std::vector<std::string>& names,
                               const std::vector<int64_t>& parameters, int64_t stages,
                               const std::vector<std::string>& split_before,
                               const std::string& layout);

}  // namespace parallel
}  // namespace accel
