// The TensorBoard tracker: serialized Events (tensorboard_events.h) in an event file.

#include "builtin_trackers.h"
#include "event_file.h"
#include "tensorboard_events.h"

#include <unistd.h>

#include <filesystem>
#include <memory>

namespace accel {
namespace tracking {
namespace {

namespace events = tensorboard_events;

class TensorBoardTracker final : public GeneralTracker {
 public:
  std::string name() const override { return "tensorboard"; }

  void start(const std::string& run_name, const std::string& logging_dir,
             const TrackerValues& options) override {
    folder_ = make_run_folder(name(), logging_dir, run_name, options);
    char host[256] = "localhost";
    ::gethostname(host, sizeof host - 1);
    const double started = wall_time_now();
    // TensorBoard's own naming: a run folder may hold several files (a resumed run adds one).
    const auto file = std::filesystem::path(folder_) /
                      ("events.out.tfevents." + std::to_string(static_cast<int64_t>(started)) +
                       "." + host + "." + std::to_string(::getpid()) + ".0");
    writer_ = std::make_unique<EventFileWriter>(file.string());
    writer_->write_record(events::file_version(started));
  }

  void store_init_configuration(const TrackerValues& config) override {
    write_config_json(folder_, config);
    if (config.empty()) return;
    std::vector<events::HParam> hparams;
    for (const auto& [key, value] : config) {
      events::HParam hparam;
      hparam.name = key;
      if (const auto* flag = std::get_if<bool>(&value.get())) {
        hparam.kind = events::HParam::Kind::boolean;
        hparam.boolean = *flag;
      } else if (value.is_number()) {
        hparam.number = value.number();
      } else {
        hparam.kind = events::HParam::Kind::text;
        hparam.text = value.text();
      }
      hparams.push_back(std::move(hparam));
    }
    for (const auto& record : events::hparams_start(wall_time_now(), hparams)) {
      writer_->write_record(record);
    }
    session_started_ = true;
  }

  void log(const TrackerValues& values, std::optional<int64_t> step) override {
    std::vector<std::pair<std::string, double>> scalars;
    std::vector<std::pair<std::string, std::string>> texts;
    for (const auto& [key, value] : values) {
      if (value.is_number()) {
        scalars.emplace_back(key, value.number());
      } else {
        texts.emplace_back(key, value.text());
      }
    }
    writer_->write_record(events::step(wall_time_now(), step.value_or(0), scalars, texts));
  }

  void finish() override {
    if (!writer_) return;
    if (session_started_) writer_->write_record(events::hparams_end(wall_time_now()));
    writer_->close();
    writer_.reset();
  }

 private:
  std::unique_ptr<EventFileWriter> writer_;
  std::string folder_;
  bool session_started_ = false;
};

}  // namespace

std::unique_ptr<GeneralTracker> make_tensorboard_tracker() {
  return std::make_unique<TensorBoardTracker>();
}

}  // namespace tracking
}  // namespace accel
