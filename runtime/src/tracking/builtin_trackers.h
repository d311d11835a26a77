#pragma once

// The trackers accel ships, by the names log_with takes.

#include <accel/tracking.h>

#include "distributed/environment.h"

#include <memory>
#include <string>
#include <vector>

namespace accel {
namespace tracking {

/// "tensorboard" (when built with protobuf), "csv", "jsonl", "mlflow" (when built with libcurl):
/// what log_with accepts besides "all".
const std::vector<std::string>& builtin_tracker_names();

/// A new, unstarted tracker of that name; null for a name that is not built in.
std::unique_ptr<GeneralTracker> make_builtin_tracker(const std::string& name);

/// TensorBoard: <logging_dir>/<run>/events.out.tfevents.<seconds>.<host>.<pid>.0, read by
/// TensorBoard itself. Numbers are scalars, strings go to the text plugin, the configuration to
/// the hparams plugin (and <run>/config.json).
std::unique_ptr<GeneralTracker> make_tensorboard_tracker();
/// CSV: <logging_dir>/<run>/metrics.csv, one row per value (step, name, value, wall_time).
std::unique_ptr<GeneralTracker> make_csv_tracker();
/// JSON lines: <logging_dir>/<run>/metrics.jsonl, one object per log call.
std::unique_ptr<GeneralTracker> make_jsonl_tracker();

/// MLflow: one run of the experiment named by init_trackers (or MLFLOW_EXPERIMENT_NAME) on the
/// tracking server MLFLOW_TRACKING_URI names, over MLflow's REST API. `env` is where the MLFLOW_*
/// variables are read (the process's environment when empty).
std::unique_ptr<GeneralTracker> make_mlflow_tracker(distributed::EnvLookup env = {});

/// The trackers "all" starts: the file trackers; MLflow only where MLFLOW_TRACKING_URI names a
/// server (Accelerate's "all" takes the trackers that can run).
std::vector<std::string> all_tracker_names(const distributed::EnvLookup& env);

/// Seconds since the epoch, as trackers stamp what they write.
double wall_time_now();

/// A file tracker's (csv, jsonl, tensorboard) folder, <logging_dir>/<run>, created. Its one
/// init_kwargs option, logging_dir, replaces the Accelerator's; any other is refused, naming
/// `tracker`.
std::string make_run_folder(const std::string& tracker, const std::string& logging_dir,
                            const std::string& run_name, const TrackerValues& options);
/// `config` written to <run_folder>/config.json (durably) unless empty.
void write_config_json(const std::string& run_folder, const TrackerValues& config);

}  // namespace tracking
}  // namespace accel
