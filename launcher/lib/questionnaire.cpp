#include "questionnaire.h"

#include "accel_common/contract.h"

#include <functional>
#include <string>

namespace accel {
namespace launcher {
namespace {

class Asker {
 public:
  Asker(std::istream& in, std::ostream& out) : in_(in), out_(out) {}

  // Asks until `parse` accepts the answer (returns an empty error).
  template <typename T>
  T ask(const std::string& question, const std::string& fallback,
        const std::function<std::string(const std::string&, T&)>& parse) {
    while (true) {
      out_ << question << " [" << fallback << "]: " << std::flush;
      std::string answer;
      if (!std::getline(in_, answer)) {
        out_ << "\n";
        throw ConfigError("accel config: input ended before every question was answered");
      }
      if (answer.empty()) answer = fallback;
      T value{};
      const std::string error = parse(answer, value);
      if (error.empty()) return value;
      out_ << "  " << error << "\n";
    }
  }

  int ask_int(const std::string& question, int fallback, int min, int max) {
    return ask<int>(question, std::to_string(fallback), [&](const std::string& a, int& v) {
      const auto parsed = contract::parse_integer(a);
      if (!parsed || *parsed < min || *parsed > max) {
        return "please answer a whole number from " + std::to_string(min) + " to " +
               std::to_string(max);
      }
      v = static_cast<int>(*parsed);
      return std::string();
    });
  }

  bool ask_yes_no(const std::string& question, bool fallback) {
    return ask<bool>(question, fallback ? "yes" : "no", [](const std::string& a, bool& v) {
      if (a == "yes" || a == "y") {
        v = true;
      } else if (a == "no" || a == "n") {
        v = false;
      } else {
        return std::string("please answer yes or no");
      }
      return std::string();
    });
  }

  std::string ask_choice(const std::string& question, const std::vector<std::string>& choices,
                         const std::string& fallback) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : "/") + c;
    return ask<std::string>(question + " (" + list + ")", fallback,
                            [&](const std::string& a, std::string& v) {
                              for (const auto& c : choices) {
                                if (a == c) {
                                  v = a;
                                  return std::string();
                                }
                              }
                              return "please answer one of " + list;
                            });
  }

  std::string ask_text(const std::string& question, const std::string& fallback) {
    return ask<std::string>(question, fallback, [](const std::string& a, std::string& v) {
      v = a;
      return std::string();
    });
  }

 private:
  std::istream& in_;
  std::ostream& out_;
};

}  // namespace

Config ask_config(std::istream& in, std::ostream& out) {
  Asker asker(in, out);
  Config c;
  c.distributed_type = asker.ask_choice("Which kind of job is this?",
                                        contract::distributed_type_choices(), "MULTI_GPU");
  const bool distributed = *c.distributed_type != "NO";
  c.num_machines = distributed ? asker.ask_int("How many machines?", 1, 1, 1 << 20) : 1;
  if (*c.num_machines > 1) {
    c.machine_rank = asker.ask_int("What is the rank of this machine?", 0, 0, *c.num_machines - 1);
    c.main_process_ip = asker.ask_text("What is the IP address of the machine of rank 0?", "");
    c.main_process_port =
        asker.ask_int("Which port should the machine of rank 0 listen on?", 29500, 1, 65535);
  } else {
    c.machine_rank = 0;
  }
  c.num_processes = distributed ? asker.ask_int("How many processes in all (over every machine)?",
                                                *c.num_machines, *c.num_machines, 1 << 20)
                                : 1;
  if (*c.distributed_type == "MULTI_GPU") {
    c.gpu_ids = asker.ask_text("Which GPUs should be used (comma-separated ids, or all)?", "all");
  }
  c.use_cpu = *c.distributed_type == "MULTI_CPU" ||
              asker.ask_yes_no("Run on the CPU even where GPUs are available?", false);
  c.mixed_precision =
      asker.ask_choice("Which mixed precision?", contract::mixed_precision_choices(), "no");
  c.gradient_accumulation_steps =
      asker.ask_int("How many gradient accumulation steps?", 1, 1, 1 << 20);
  if (distributed) {
    c.sharding_strategy =
        asker.ask_choice("How should parameters, gradients and optimizer states be sharded?",
                         contract::sharding_strategy_choices(), "NO_SHARD");
    if (*c.sharding_strategy != "NO_SHARD") {
      c.offload_params = asker.ask_yes_no(
          "Offload the shards of the parameters, their gradients and the optimizer state to the "
          "CPU?",
          false);
    }
  }
  return c;
}

Config default_config(int gpu_count) {
  Config c;
  c.distributed_type = gpu_count > 1 ? "MULTI_GPU" : "NO";
  c.num_processes = gpu_count > 1 ? gpu_count : 1;
  c.num_machines = 1;
  c.machine_rank = 0;
  c.mixed_precision = "no";
  c.use_cpu = gpu_count == 0;
  c.gpu_ids = "all";
  c.gradient_accumulation_steps = 1;
  return c;
}

}  // namespace launcher
}  // namespace accel
