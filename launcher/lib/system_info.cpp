#include "system_info.h"

#include "accel_common/contract.h"

#include <torch/version.h>

#include <sys/utsname.h>
#include <unistd.h>

#include <dirent.h>
#include <cstdio>
#include <cstdlib>
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

namespace {

// What LibTorch itself reports about CUDA, asked of accel-selfcheck (the launcher does not link
// LibTorch): "yes (N devices)", "no", or why it could not be asked.
std::string cuda_available(const std::string& selfcheck) {
  const std::string command = "'" + selfcheck + "' --runtime-info 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "unknown (could not run " + selfcheck + ")";
  std::string output;
  char buffer[256];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = ::pclose(pipe);
  std::string available, devices;
  std::istringstream lines(output);
  std::string key, value;
  while (lines >> key >> value) {
    if (key == "cuda_available") available = value;
    if (key == "cuda_devices") devices = value;
  }
  if (status != 0 || available.empty()) return "unknown (" + selfcheck + " did not answer)";
  return available == "yes" ? "yes (" + devices + " devices)" : "no";
}

}  // namespace

void print_environment(std::ostream& out, const std::string& config_path,
                       const std::string& selfcheck) {
  utsname uts{};
  ::uname(&uts);
  std::string cpu = first_line_with("/proc/cpuinfo", "model name\t: ");
  out << "- accel version: " << ACCEL_VERSION << "\n";
  out << "- LibTorch version (built against): " << TORCH_VERSION << "\n";
  out << "- LibTorch CUDA build: " << (ACCEL_TORCH_HAS_CUDA ? "yes" : "no") << "\n";
  out << "- CUDA available: " << cuda_available(selfcheck) << "\n";
  if (ACCEL_TORCH_HAS_CUDA) {
    out << "- NCCL backend: yes, built with NCCL "
        << (std::string(ACCEL_NCCL_VERSION).empty() ? "(version unknown)" : ACCEL_NCCL_VERSION)
        << "\n";
  } else {
    out << "- NCCL backend: no (CPU build of LibTorch)\n";
  }
  out << "- Gloo backend: yes\n";
  const char* fused_variable = std::getenv(contract::kFusedOptimizer);
  const std::string fused = fused_variable ? fused_variable : "";
  const bool off = contract::parse_bool(fused) == false;
  out << "- fused optimizer steps (AdamW, Adam, SGD): " << (off ? "off" : "on")
      << (fused.empty() ? " (default)"
                        : " (" + std::string(contract::kFusedOptimizer) + "=" + fused + ")")
      << "\n";
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
