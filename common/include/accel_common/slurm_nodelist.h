#pragma once

// SLURM node-list parsing: the launcher and the runtime both find the main machine from it.

#include <string>

namespace accel {
namespace detail {

/// The first host of a SLURM node list ("node[03-05,9]" -> "node03", "a,b" -> "a").
std::string first_slurm_host(const std::string& nodelist);

}  // namespace detail
}  // namespace accel
