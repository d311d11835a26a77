// The `accel` command line.

#include "launch.h"

#include <CLI/CLI.hpp>

#include <iostream>

namespace {

void add_launch(CLI::App& app, accel::launcher::LaunchOptions& o, bool& cpu) {
  auto* launch = app.add_subcommand(
      "launch", "Run a program as N processes on this machine (one node of a multi-node job)");
  launch->add_option("--num_processes", o.num_processes, "Processes on this machine")
      ->capture_default_str();
  launch->add_option("--num_machines", o.num_machines, "Machines in the job")
      ->capture_default_str();
  launch->add_option("--machine_rank", o.machine_rank, "This machine's rank in the job")
      ->capture_default_str();
  launch->add_option("--main_process_ip", o.main_process_ip,
                     "Address of the machine with rank 0")
      ->capture_default_str();
  launch->add_option("--main_process_port", o.main_process_port,
                     "Rendezvous port on the main machine (default: a free port on one machine, "
                     "29500 on several)");
  launch->add_option("--mixed_precision", o.mixed_precision, "no, bf16, fp16 or fp8");
  launch->add_option("--gradient_accumulation_steps", o.gradient_accumulation_steps,
                     "Micro-steps per optimizer step");
  launch->add_flag("--cpu", cpu, "Run on the CPU even where CUDA is available");
  launch->add_option("--grace_period", o.grace_period,
                     "Seconds between SIGTERM and SIGKILL when stopping the job")
      ->capture_default_str();
  // Everything from the first non-option argument on is the program and its own arguments.
  launch->prefix_command();
  launch->footer("PROGRAM [ARGS...] follow the options; ARGS are passed to every process unchanged.");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"accel: run LibTorch training programs on many processes, devices and machines"};
  app.require_subcommand(1);
  accel::launcher::LaunchOptions launch_options;
  bool cpu = false;
  add_launch(app, launch_options, cpu);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (app.got_subcommand("launch")) {
    auto* launch = app.get_subcommand("launch");
    for (auto& arg : launch->remaining()) launch_options.command.push_back(arg);
    launch_options.cpu = cpu;
    if (auto error = accel::launcher::validate(launch_options)) {
      std::cerr << "accel launch: " << *error << "\n";
      return 2;
    }
    return accel::launcher::launch(launch_options);
  }
  return 0;
}
