#include <accel/accelerator.h>
#include <accel/profiler.h>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/api.h>
#include <torch/cuda.h>

#include <filesystem>
#include <iostream>
#include <set>

namespace accel {
namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

ProfilerConfig config_of(const ProfileOptions& options) {
  return ProfilerConfig(ProfilerState::KINETO, options.record_shapes(), options.profile_memory(),
                        options.with_stack(), options.with_flops());
}

std::set<ActivityType> activities_of(const ProfileOptions& options) {
  std::set<ActivityType> activities{ActivityType::CPU};
  if (options.cuda() && torch::cuda::is_available()) activities.insert(ActivityType::CUDA);
  return activities;
}

}  // namespace

Profiler::Profiler(Accelerator* accelerator, ProfileOptions options)
    : accelerator_(accelerator), options_(std::move(options)) {
  TORCH_CHECK(!torch::profiler::impl::profilerEnabled(),
              "accel: profile(): a profiler is already running in this thread");
  const auto config = config_of(options_);
  const auto activities = activities_of(options_);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  running_ = true;
}

Profiler::Profiler(Profiler&& other) noexcept
    : accelerator_(other.accelerator_),
      options_(std::move(other.options_)),
      running_(std::exchange(other.running_, false)) {}

Profiler::~Profiler() {
  if (!running_) return;
  try {
    stop();
  } catch (const std::exception& e) {
    std::cerr << "accel: profile(): " << e.what() << "\n";
  }
}

std::string Profiler::stop() {
  TORCH_CHECK(running_, "accel: profile(): stop() was already called");
  running_ = false;
  auto result = profiler::disableProfiler();
  std::string path;
  if (!options_.output_trace_dir().empty()) {
    std::filesystem::create_directories(options_.output_trace_dir());
    path = (std::filesystem::path(options_.output_trace_dir()) /
            ("profile_" + std::to_string(accelerator_->process_index()) + ".json"))
               .string();
    result->save(path);
  }
  accelerator_->wait_for_everyone();
  return path;
}

}  // namespace accel
