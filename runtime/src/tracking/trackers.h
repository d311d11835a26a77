#pragma once

// The run's experiment trackers, as the Accelerator owns them: started by init_trackers on the
// main process, written by log, stopped by end_training. A tracker that throws is reported,
// stopped and dropped; training goes on.

#include <accel/tracking.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel::tracking {

/// What init_trackers starts: the built-in trackers named by AcceleratorOptions::log_with and the
/// program's own, under one project name and logging folder.
struct TrackerStart {
  std::string project_name;
  std::string logging_dir;
  std::vector<std::string> builtin;
  std::vector<std::shared_ptr<GeneralTracker>> custom;
  TrackerValues config;
  std::map<std::string, TrackerValues> init_kwargs;
};

class Trackers {
 public:
  /// Only the main process's trackers write; the others accept everything and do nothing.
  explicit Trackers(bool main_process) : main_process_(main_process) {}

  /// Starts each tracker (a failed start is reported and skipped); a second call before end()
  /// is an error, as is a project name that is not a single folder name.
  void init(const TrackerStart& start);
  /// Writes `values` to every started tracker; a NaN or an infinity is named and left out.
  void log(const TrackerValues& values, std::optional<int64_t> step);
  /// The started tracker called `name`; a blank one on the other processes.
  GeneralTracker& get(const std::string& name);
  /// Finishes and forgets every tracker; init may then be called again.
  void end();

 private:
  bool main_process_;
  bool initialized_ = false;
  std::vector<std::shared_ptr<GeneralTracker>> started_;
};

}  // namespace accel::tracking
