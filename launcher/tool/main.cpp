// The `accel` command line: launch, config, test, env, estimate-memory and merge-weights.

#include "command_line.h"
#include "config.h"
#include "launch.h"
#include "launch_output.h"
#include "launch_settings.h"
#include "memory_estimate.h"
#include "merge_weights.h"
#include "questionnaire.h"
#include "system_info.h"

#include "accel_common/contract.h"
#include "accel_common/safetensors_header.h"

#include <CLI/CLI.hpp>

#include <sys/stat.h>
#include <unistd.h>
#include <iostream>
#include <stdexcept>

namespace {

using accel::launcher::Config;
using accel::launcher::ConfigError;

using accel::launcher::LaunchArgs;

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

/// `accelerate launch`'s FSDP and DeepSpeed flags, under its names.
void add_sharding_flags(CLI::App& launch, accel::launcher::ShardingFlags& f) {
  using Flags = accel::launcher::ShardingFlags;
  const std::string fsdp = "FSDP", deepspeed = "DeepSpeed";
  const std::string strategies =
      accel::contract::join(accel::contract::sharding_strategy_choices());
  const std::string dict_types = accel::contract::join(accel::contract::state_dict_type_choices());
  // The flags that take a word, each read and checked by config_of_flags.
  const struct {
    const char* name;
    std::optional<std::string> Flags::*value;
    std::string help;
    const std::string& group;
  } words[] = {
      {"--fsdp_version", &Flags::fsdp_version, "1 or 2: how --fsdp_reshard_after_forward is read",
       fsdp},
      {"--fsdp_sharding_strategy", &Flags::sharding_strategy, strategies, fsdp},
      {"--fsdp_reshard_after_forward", &Flags::reshard_after_forward,
       "fsdp_version 1: a strategy name; 2: true (FULL_SHARD) or false (SHARD_GRAD_OP)", fsdp},
      {"--fsdp_offload_params", &Flags::offload_params,
       "true: shards, gradients and optimizer state in host memory", fsdp},
      {"--fsdp_auto_wrap_policy", &Flags::auto_wrap_policy,
       "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP", fsdp},
      {"--fsdp_transformer_layer_cls_to_wrap", &Flags::classes_to_wrap,
       "FULL_SHARD's unit classes, comma-separated", fsdp},
      {"--fsdp_state_dict_type", &Flags::state_dict_type, dict_types, fsdp},
      {"--fsdp_activation_checkpointing", &Flags::activation_checkpointing,
       "true: checkpoint the units' activations", fsdp},
      {"--fsdp_backward_prefetch", &Flags::backward_prefetch,
       "BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH", fsdp},
      {"--fsdp_forward_prefetch", &Flags::forward_prefetch,
       "true: gather the next unit while one runs", fsdp},
      {"--fsdp_use_orig_params", &Flags::use_orig_params,
       "Accepted: accel's sharded parameters are always the model's own", fsdp},
      {"--fsdp_cpu_ram_efficient_loading", &Flags::cpu_ram_efficient_loading, "true or false",
       fsdp},
      {"--fsdp_sync_module_states", &Flags::sync_module_states,
       "Accepted: prepare(model) always starts every process from rank 0's weights", fsdp},
      {"--offload_optimizer_device", &Flags::offload_optimizer_device, "none or cpu", deepspeed},
      {"--offload_param_device", &Flags::offload_param_device, "none or cpu", deepspeed},
  };
  launch
      .add_flag("--use_fsdp", f.use_fsdp,
                "Shard with FSDP's strategies (FULL_SHARD unless the flags or config say)")
      ->group(fsdp);
  for (const auto& word : words) {
    launch.add_option(word.name, f.*(word.value), word.help)->group(word.group);
  }
  launch
      .add_option("--fsdp_min_num_params", f.min_num_params,
                  "SIZE_BASED_WRAP's parameters per unit")
      ->group(fsdp);
  launch
      .add_flag("--use_deepspeed", f.use_deepspeed,
                "Shard as DeepSpeed's ZeRO (stage 2 unless --zero_stage says)")
      ->group(deepspeed);
  launch
      .add_option("--zero_stage", f.zero_stage,
                  "0..3: NO_SHARD, SHARD_OPTIMIZER_STATE, SHARD_GRAD_OP, FULL_SHARD")
      ->group(deepspeed);
}

/// `accelerate launch`'s device-mesh flags (a size given implies --use_parallelism_config).
void add_parallelism_flags(CLI::App& launch, LaunchArgs& args) {
  static const std::string group = "Parallelism config (the device mesh)";
  launch
      .add_flag("--use_parallelism_config", args.use_parallelism_config,
                "Lay the processes out as pp x dp_replicate x dp_shard x cp x tp (sizes below, 1 "
                "unless given)")
      ->group(group);
  const std::pair<const char*, std::optional<int>*> sizes[] = {
      {"--parallelism_config_dp_replicate_size", &args.dp_replicate_size},
      {"--parallelism_config_dp_shard_size", &args.dp_shard_size},
      {"--parallelism_config_tp_size", &args.tp_size},
      {"--parallelism_config_cp_size", &args.cp_size},
      {"--parallelism_config_pp_size", &args.pp_size}};
  for (const auto& [name, value] : sizes) {
    launch.add_option(name, *value, "Processes along this dimension of the mesh")->group(group);
  }
}

int run_launch(const LaunchArgs& args, std::vector<std::string> command) {
  Config config;
  const std::string path = args.config_file.value_or(accel::launcher::default_config_path());
  if (args.config_file || file_exists(path)) {
    std::vector<std::string> warnings;
    try {
      config = accel::launcher::load_config(path, &warnings);
    } catch (const ConfigError& e) {
      accel::launcher::say(e.what());
      return 2;
    }
    for (const auto& w : warnings) accel::launcher::warn(w);
  }
  accel::launcher::LaunchOptions options;
  std::vector<std::string> unapplied;
  try {
    options = accel::launcher::resolve_launch_options(
        args, config, accel::launcher::job_environment(), &unapplied);
  } catch (const std::invalid_argument& e) {
    accel::launcher::say(e.what());
    return 2;
  }
  for (const auto& w : unapplied) accel::launcher::warn(w);
  options.command = std::move(command);
  if (auto error = accel::launcher::validate(options)) {
    accel::launcher::say(*error);
    return 2;
  }
  return accel::launcher::launch(options);
}

// accel-selfcheck sits beside the accel binary (in the build tree and when installed).
std::string selfcheck_path() {
  char buffer[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  std::string self = n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "accel";
  const auto slash = self.rfind('/');
  return (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) +
         "/accel-selfcheck";
}

int run_config(const std::optional<std::string>& config_file, bool defaults) {
  const std::string path = config_file.value_or(accel::launcher::default_config_path());
  try {
    const Config config = defaults ? accel::launcher::default_config(accel::launcher::gpu_count())
                                   : accel::launcher::ask_config(std::cin, std::cout);
    accel::launcher::save_config(config, path);
  } catch (const ConfigError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  std::cout << "accel config: written to " << path << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"accel: run LibTorch training programs on many processes, devices and machines"};
  app.require_subcommand(1);

  LaunchArgs args;
  auto* launch = app.add_subcommand(
      "launch", "Run a program as a job of processes, on this machine or as one of several");
  launch->add_option("--config_file", args.config_file,
                     "Config file (default: the one `accel config` wrote, if any)");
  launch->add_option("--num_processes", args.num_processes,
                     "Processes in the whole job (each machine runs num_processes / num_machines)");
  launch->add_option("--num_machines", args.num_machines, "Machines in the job (default 1)");
  launch->add_option("--machine_rank", args.machine_rank, "This machine's rank (default 0)");
  launch->add_option("--main_process_ip", args.main_process_ip,
                     "Address of the machine of rank 0 (default 127.0.0.1)");
  launch->add_option("--main_process_port", args.main_process_port,
                     "Rendezvous port on the machine of rank 0 (default: a free port on one "
                     "machine, 29500 on several)");
  launch->add_option("--mixed_precision", args.mixed_precision,
                     accel::contract::join(accel::contract::mixed_precision_choices()));
  launch->add_option("--fp8_backend", args.fp8_backend,
                     "FP8 recipes under --mixed_precision fp8: AO (torchao's, accel's own)");
  launch->add_option("--gradient_accumulation_steps", args.gradient_accumulation_steps,
                     "Micro-steps per optimizer step");
  launch->add_option("--gpu_ids", args.gpu_ids, "GPUs to use: all, or ids such as 0,1");
  launch->add_flag("--cpu", args.cpu, "Run on the CPU even where CUDA is available");
  launch->add_flag("--rank_prefix", args.rank_prefix, "Prefix each output line with [rank N]");
  launch->add_option("--tee", args.tee, "Also write each process's output to DIR/rank_N.log");
  launch
      ->add_option("--grace_period", args.grace_period,
                   "Seconds between SIGTERM and SIGKILL when stopping the job")
      ->capture_default_str();
  launch
      ->add_option("--max_restarts", args.max_restarts,
                   "Restart the whole group up to N times when a process fails (a restarted "
                   "program sees ACCEL_RESTART_COUNT and ACCEL_RESUME=auto)")
      ->check(CLI::NonNegativeNumber);
  launch
      ->add_option("--monitor_interval", args.monitor_interval,
                   "Seconds between checks of the processes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_sharding_flags(*launch, args.sharding);
  add_parallelism_flags(*launch, args);
  // Everything from the first non-option argument on is the program and its own arguments.
  launch->prefix_command();
  launch->footer(
      "PROGRAM [ARGS...] follow the options; ARGS are passed to every process unchanged.\n"
      "Precedence: command line, then the config file, then the defaults. Under srun, the number\n"
      "of machines, this machine's rank and the main address come from SLURM.");

  std::optional<std::string> config_file;
  auto* config = app.add_subcommand("config", "Write a config file by answering questions");
  config->add_option("--config_file", config_file,
                     "Where to write it (default: " + accel::launcher::default_config_path() + ")");
  auto* config_default =
      config->add_subcommand("default", "Write a sensible config file without asking");

  LaunchArgs test_args;
  auto* test = app.add_subcommand(
      "test",
      "Run accel's self-check in the configured setup: processes, collectives, data "
      "sharding and a short training-equivalence check");
  test->add_option("--config_file", test_args.config_file, "Config file to test");
  test->add_option("--num_processes", test_args.num_processes, "Override the configured count");
  test->add_flag("--cpu", test_args.cpu, "Run on the CPU");

  auto* env = app.add_subcommand("env", "Print what a bug report needs to know");
  std::optional<std::string> env_config_file;
  env->add_option("--config_file", env_config_file, "Config file to show");

  std::string model;
  int estimate_processes = 1;
  auto* estimate = app.add_subcommand(
      "estimate-memory", "Memory per process to run or train a model, by precision and sharding");
  estimate
      ->add_option("model", model,
                   "A parameter count (7e9, 7B, 125M) or a .safetensors file or "
                   "model.safetensors.index.json")
      ->required();
  estimate->add_option("--num_processes", estimate_processes, "Processes sharing the model")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);

  std::string merge_from, merge_to;
  auto* merge = app.add_subcommand(
      "merge-weights",
      "Turn a save_state checkpoint into whole weights (model.safetensors): SHARDED_STATE_DICT "
      "shards are merged; FULL_STATE_DICT weights (tensor-parallel ones too) are whole already "
      "and are copied");
  merge->add_option("checkpoint_directory", merge_from, "The save_state folder")->required();
  merge->add_option("output_path", merge_to, "Where the merged weights go")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (launch->parsed()) {
    // The first argument that is not an option starts the program; an unknown option before it
    // would otherwise be run as the program, on every process.
    auto command = launch->remaining();
    if (!command.empty() && command.front().size() > 1 && command.front()[0] == '-') {
      std::vector<std::string> known;
      for (const CLI::Option* option : launch->get_options()) {
        for (const auto& name : option->get_lnames()) known.push_back("--" + name);
      }
      accel::launcher::say(accel::launcher::unknown_option_message(command.front(), known));
      return 2;
    }
    return run_launch(args, command);
  }
  if (test->parsed()) return run_launch(test_args, {selfcheck_path()});
  if (config->parsed()) return run_config(config_file, config_default->parsed());
  if (estimate->parsed()) {
    double parameters = 0;
    if (auto count = accel::launcher::parse_parameter_count(model)) {
      parameters = *count;
    } else {
      try {
        parameters = accel::launcher::count_parameters(model);
      } catch (const accel::detail::SafetensorsError& e) {
        std::cerr << "accel estimate-memory: " << e.what() << "\n";
        return 2;
      }
    }
    accel::launcher::print_estimates(std::cout, parameters, estimate_processes);
    return 0;
  }
  if (merge->parsed()) {
    try {
      for (const auto& file : accel::launcher::merge_weights(merge_from, merge_to)) {
        std::cout << "accel merge-weights: wrote " << file << "\n";
      }
    } catch (const accel::launcher::MergeError& e) {
      std::cerr << "accel merge-weights: " << e.what() << "\n";
      return 2;
    }
    return 0;
  }
  if (env->parsed()) {
    accel::launcher::print_environment(
        std::cout, env_config_file.value_or(accel::launcher::default_config_path()),
        selfcheck_path());
    return 0;
  }
  return 0;
}
