#include "accel_common/slurm_nodelist.h"

#include <cctype>

namespace accel {
namespace detail {

std::string first_slurm_host(const std::string& nodelist) {
  const size_t bracket = nodelist.find('[');
  const size_t comma = nodelist.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) {
    return nodelist.substr(0, comma);
  }
  const std::string prefix = nodelist.substr(0, bracket);
  size_t end = bracket + 1;
  while (end < nodelist.size() && std::isdigit(static_cast<unsigned char>(nodelist[end]))) ++end;
  return prefix + nodelist.substr(bracket + 1, end - bracket - 1);
}

}  // namespace detail
}  // namespace accel
