#include "system_info.h"

#include <torch/version.h>

#include <sys/utsname.h>
#include <unistd.h>

#include <dirent.h>
#include <fstream>
#include <sstream>

namespace accel {
namespace launcher {
namespace {

std::string first_line_with(const std::string& path, const std::string& prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

std::string unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

}  // namespace

int gpu_count() {
  DIR* dir = ::opendir("/proc/driver/nvidia/gpus");
  if (dir == nullptr) return 0;
  int count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count;
}

void print_environment(std::ostream& out, const std::string& config_path) {
  utsname uts{};
  ::uname(&uts);
  std::string cpu = first_line_with("/proc/cpuinfo", "model name\t: ");
  out << "- accel version: " << ACCEL_VERSION << "\n";
  out << "- LibTorch version (built against): " << TORCH_VERSION << "\n";
  out << "- LibTorch CUDA build: " << (ACCEL_TORCH_HAS_CUDA ? "yes" : "no") << "\n";
  out << "- NCCL backend: " << (ACCEL_TORCH_HAS_CUDA ? "yes" : "no (CPU build of LibTorch)")
      << "\n";
  out << "- Gloo backend: yes\n";
  out << "- NVIDIA GPUs: " << gpu_count() << "\n";
  out << "- CPU: " << (cpu.empty() ? std::string(uts.machine) : cpu) << ", "
      << ::sysconf(_SC_NPROCESSORS_ONLN) << " cores\n";
  out << "- OS: " << unquote(first_line_with("/etc/os-release", "PRETTY_NAME=")) << " ("
      << uts.sysname << " " << uts.release << ", " << uts.machine << ")\n";
  std::ifstream config(config_path);
  if (!config) {
    out << "- config file: none (" << config_path << " does not exist)\n";
    return;
  }
  out << "- config file: " << config_path << "\n";
  std::string line;
  while (std::getline(config, line)) out << "    " << line << "\n";
}

}  // namespace launcher
}  // namespace accel
