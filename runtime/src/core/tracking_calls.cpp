// The Accelerator's tracking calls: what core hands the run's trackers (tracking/trackers.h).

#include "accelerator_impl.h"

namespace accel {

void Accelerator::init_trackers(const std::string& project_name, const TrackerValues& config,
                                const std::map<std::string, TrackerValues>& init_kwargs) {
  const auto& project = impl_->project;
  impl_->trackers.init(
      {project_name, project.logging_dir().empty() ? project.project_dir() : project.logging_dir(),
       impl_->options.log_with, impl_->options.trackers, config, init_kwargs});
}

void Accelerator::log(const TrackerValues& values, std::optional<int64_t> step) {
  impl_->trackers.log(values, step);
}

GeneralTracker& Accelerator::get_tracker(const std::string& name) {
  return impl_->trackers.get(name);
}

void Accelerator::end_training() { impl_->trackers.end(); }

}  // namespace accel
