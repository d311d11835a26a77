#include "child_environment.h"
#include "launch_output.h"

#include "accel_common/contract.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

namespace {

void set_env(const std::string& name, const std::string& value) {
  ::setenv(name.c_str(), value.c_str(), 1);
}

}  // namespace

[[noreturn]] void exec_child(const LaunchOptions& o, int local_rank, int port, int restart,
                             const sigset_t& original_mask, int stdout_fd, int stderr_fd) {
  if (stdout_fd >= 0) ::dup2(stdout_fd, STDOUT_FILENO);
  if (stderr_fd >= 0) ::dup2(stderr_fd, STDERR_FILENO);
  const int world = o.num_processes;
  const int per_machine = o.num_processes / o.num_machines;
  set_env(contract::kRank, std::to_string(o.machine_rank * per_machine + local_rank));
  set_env(contract::kWorldSize, std::to_string(world));
  set_env(contract::kLocalRank, std::to_string(local_rank));
  set_env(contract::kLocalWorldSize, std::to_string(per_machine));
  set_env(contract::kGroupRank, std::to_string(o.machine_rank));
  set_env(contract::kMasterAddr, o.main_process_ip);
  set_env(contract::kMasterPort, std::to_string(port));
  // As torchrun: one thread per process unless the user chose, so N processes do not fight
  // over the cores.
  if (world > 1) ::setenv("OMP_NUM_THREADS", "1", 0);
  if (o.mixed_precision) set_env(contract::kMixedPrecision, *o.mixed_precision);
  if (o.fp8_backend) set_env(contract::kFp8Backend, *o.fp8_backend);
  if (o.gradient_accumulation_steps) {
    set_env(contract::kGradientAccumulationSteps, std::to_string(*o.gradient_accumulation_steps));
  }
  if (o.cpu) set_env(contract::kUseCpu, "1");
  if (o.sharding_strategy) set_env(contract::kShardingStrategy, *o.sharding_strategy);
  if (o.classes_to_wrap) set_env(contract::kFsdpClassesToWrap, *o.classes_to_wrap);
  if (o.min_num_params) set_env(contract::kFsdpMinNumParams, std::to_string(*o.min_num_params));
  if (o.state_dict_type) set_env(contract::kFsdpStateDictType, *o.state_dict_type);
  if (o.offload_params) set_env(contract::kFsdpOffloadParams, *o.offload_params ? "true" : "false");
  if (o.activation_checkpointing) {
    set_env(contract::kFsdpActivationCheckpointing, *o.activation_checkpointing ? "true" : "false");
  }
  if (o.forward_prefetch) {
    set_env(contract::kFsdpForwardPrefetch, *o.forward_prefetch ? "true" : "false");
  }
  if (o.backward_prefetch) set_env(contract::kFsdpBackwardPrefetch, *o.backward_prefetch);
  if (o.find_unused_parameters) {
    set_env(contract::kDdpFindUnusedParameters, *o.find_unused_parameters ? "true" : "false");
  }
  if (o.static_graph) set_env(contract::kDdpStaticGraph, *o.static_graph ? "true" : "false");
  if (o.comm_hook) set_env(contract::kDdpCommHook, *o.comm_hook);
  if (o.log_with) set_env(contract::kLogWith, *o.log_with);
  if (o.parallelism) {
    set_env(contract::kUseParallelismConfig, "true");
    set_env(contract::kDpReplicateSize, std::to_string(o.parallelism->dp_replicate));
    set_env(contract::kDpShardSize, std::to_string(o.parallelism->dp_shard));
    set_env(contract::kTpSize, std::to_string(o.parallelism->tp));
    set_env(contract::kCpSize, std::to_string(o.parallelism->cp));
    set_env(contract::kPpSize, std::to_string(o.parallelism->pp));
  }
  // torchrun's names too, for programs written against it.
  set_env(contract::kRestartCount, std::to_string(restart));
  set_env(contract::kTorchelasticRestartCount, std::to_string(restart));
  set_env(contract::kTorchelasticMaxRestarts, std::to_string(o.max_restarts));
  if (restart > 0) set_env(contract::kResume, "auto");
  if (o.gpu_ids && *o.gpu_ids != "all") set_env("CUDA_VISIBLE_DEVICES", *o.gpu_ids);
  // Its own process group, so the launcher alone decides how a terminal's Ctrl-C reaches it.
  ::setpgid(0, 0);
  ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  std::vector<char*> argv;
  for (const auto& arg : o.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  // stdio, not say(): between fork and exec, nothing that may allocate.
  std::fprintf(stderr, "%scannot run '%s': %s\n", kLaunchPrefix, argv[0], std::strerror(errno));
  std::_Exit(127);
}

}  // namespace launcher
}  // namespace accel
