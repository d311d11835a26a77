// The CSV and JSON-lines trackers, and what every built-in tracker shares: the run folder, the
// configuration file and the registry of names.

#include "builtin_trackers.h"
#include "util/durable_file.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace accel {
namespace tracking {
namespace {

namespace fs = std::filesystem;

nlohmann::json to_json(const TrackerValue& value) {
  return std::visit([](const auto& v) { return nlohmann::json(v); }, value.get());
}

/// A text file the tracker appends lines to, flushed after each call so that a crash keeps every
/// logged step. A file from an earlier run of the same project is continued (a resumed run).
class AppendedFile {
 public:
  void open(const std::string& path) {
    path_ = path;
    const bool existed = fs::exists(path);
    file_ = std::fopen(path.c_str(), "a");
    TORCH_CHECK(file_ != nullptr, "accel: cannot open ", path,
                " for appending: ", std::strerror(errno));
    fresh_ = !existed || fs::file_size(path) == 0;
  }
  ~AppendedFile() { close(); }
  /// True when the file was created (or empty): a header goes first.
  bool fresh() const { return fresh_; }
  void write(const std::string& text) {
    TORCH_CHECK(file_ != nullptr, "accel: ", path_, " is closed");
    const bool written =
        std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0;
    TORCH_CHECK(written, "accel: cannot write to ", path_, ": ", std::strerror(errno));
  }
  void close() {
    if (file_ != nullptr) std::fclose(file_);
    file_ = nullptr;
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  bool fresh_ = false;
};

/// A CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

class CsvTracker final : public GeneralTracker {
 public:
  std::string name() const override { return "csv"; }
  void start(const std::string& run_name, const std::string& logging_dir,
             const TrackerValues& options) override {
    folder_ = make_run_folder(name(), logging_dir, run_name, options);
    file_.open((fs::path(folder_) / "metrics.csv").string());
    if (file_.fresh()) file_.write("step,name,value,wall_time\n");
  }
  void store_init_configuration(const TrackerValues& config) override {
    write_config_json(folder_, config);
  }
  void log(const TrackerValues& values, std::optional<int64_t> step) override {
    // Long form, a row per value: the columns stay the same whatever each call logs.
    char time[32];
    std::snprintf(time, sizeof time, "%.6f", wall_time_now());
    std::string rows;
    for (const auto& [key, value] : values) {
      rows += (step ? std::to_string(*step) : std::string()) + "," + csv_field(key) + "," +
              csv_field(value.text()) + "," + time + "\n";
    }
    file_.write(rows);
  }
  void finish() override { file_.close(); }

 private:
  std::string folder_;
  AppendedFile file_;
};

class JsonLinesTracker final : public GeneralTracker {
 public:
  std::string name() const override { return "jsonl"; }
  void start(const std::string& run_name, const std::string& logging_dir,
             const TrackerValues& options) override {
    folder_ = make_run_folder(name(), logging_dir, run_name, options);
    file_.open((fs::path(folder_) / "metrics.jsonl").string());
  }
  void store_init_configuration(const TrackerValues& config) override {
    write_config_json(folder_, config);
  }
  void log(const TrackerValues& values, std::optional<int64_t> step) override {
    nlohmann::json line = nlohmann::json::object();
    line["step"] = step ? nlohmann::json(*step) : nlohmann::json();
    line["wall_time"] = wall_time_now();
    nlohmann::json logged = nlohmann::json::object();
    for (const auto& [key, value] : values) logged[key] = to_json(value);
    line["values"] = std::move(logged);
    file_.write(line.dump() + "\n");
  }
  void finish() override { file_.close(); }

 private:
  std::string folder_;
  AppendedFile file_;
};

}  // namespace

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const std::vector<std::string>& builtin_tracker_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> built;
#ifdef ACCEL_WITH_TENSORBOARD
    built.push_back("tensorboard");
#endif
    built.push_back("csv");
    built.push_back("jsonl");
#ifdef ACCEL_WITH_MLFLOW
    built.push_back("mlflow");
#endif
    return built;
  }();
  return names;
}

std::vector<std::string> all_tracker_names(const distributed::EnvLookup& env) {
  std::vector<std::string> names;
  for (const auto& name : builtin_tracker_names()) {
    if (name != "mlflow" || distributed::env_string(env, "MLFLOW_TRACKING_URI"))
      names.push_back(name);
  }
  return names;
}

std::unique_ptr<GeneralTracker> make_builtin_tracker(const std::string& name) {
#ifdef ACCEL_WITH_TENSORBOARD
  if (name == "tensorboard") return make_tensorboard_tracker();
#endif
#ifdef ACCEL_WITH_MLFLOW
  if (name == "mlflow") return make_mlflow_tracker();
#endif
  if (name == "csv") return make_csv_tracker();
  if (name == "jsonl") return make_jsonl_tracker();
  return nullptr;
}

std::unique_ptr<GeneralTracker> make_csv_tracker() { return std::make_unique<CsvTracker>(); }
std::unique_ptr<GeneralTracker> make_jsonl_tracker() {
  return std::make_unique<JsonLinesTracker>();
}

std::string make_run_folder(const std::string& tracker, const std::string& logging_dir,
                            const std::string& run_name, const TrackerValues& options) {
  std::string parent = logging_dir;
  for (const auto& [key, value] : options) {
    TORCH_CHECK(key == "logging_dir", "init_kwargs for '", tracker, "' has '", key,
                "'; the file trackers take only logging_dir");
    parent = value.text();
  }
  const auto folder = fs::path(parent.empty() ? "." : parent) / run_name;
  std::error_code error;
  fs::create_directories(folder, error);
  TORCH_CHECK(!error && fs::is_directory(folder), "accel: cannot create the logging folder ",
              folder.string(), ": ", error ? error.message() : "not a directory");
  return folder.string();
}

void write_config_json(const std::string& run_folder, const TrackerValues& config) {
  if (config.empty()) return;
  nlohmann::json object = nlohmann::json::object();
  for (const auto& [key, value] : config) object[key] = to_json(value);
  util::write_file_durably((fs::path(run_folder) / "config.json").string(), object.dump(2) + "\n");
}

}  // namespace tracking
}  // namespace accel
