// TrackerValue, and the run's trackers (trackers.h): they run on the main process; one that fails
// is stopped and reported, and training goes on.

#include "trackers.h"

#include "builtin_trackers.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <sstream>

namespace accel {

// ---- TrackerValue -------------------------------------------------------------------------------

TrackerValue::TrackerValue(const at::Tensor& value) {
  TORCH_CHECK(value.defined() && value.numel() == 1,
              "accel: a logged tensor must hold one element (a loss, a metric); this one has ",
              value.defined() ? value.numel() : 0, "; log .mean() or each element by name");
  value_ = value.detach().to(at::kCPU).to(at::kDouble).item<double>();
}

double TrackerValue::number() const {
  if (const auto* b = std::get_if<bool>(&value_)) return *b ? 1.0 : 0.0;
  if (const auto* i = std::get_if<int64_t>(&value_)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&value_)) return *d;
  TORCH_CHECK(false, "accel: the logged value '", std::get<std::string>(value_),
              "' is text, not a number");
  return 0;  // not reached
}

std::string TrackerValue::text() const {
  if (const auto* b = std::get_if<bool>(&value_)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&value_)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value_)) {
    // The shortest form that reads back as the same double (17 significant digits always do).
    std::string shortest;
    for (int digits = 1; digits <= 17; ++digits) {
      std::ostringstream shorter;
      shorter.precision(digits);
      shorter << *d;
      shortest = shorter.str();
      double back = 0;
      std::istringstream(shortest) >> back;
      if (back == *d) break;
    }
    return shortest;
  }
  return std::get<std::string>(value_);
}

namespace {

/// What get_tracker gives on processes other than the main one: accepts everything, does nothing.
class BlankTracker final : public GeneralTracker {
 public:
  std::string name() const override { return "blank"; }
  void store_init_configuration(const TrackerValues&) override {}
  void log(const TrackerValues&, std::optional<int64_t>) override {}
};

/// Runs `call` on `tracker`; on an exception, says which tracker failed in what and returns false.
template <typename Call>
bool guarded(GeneralTracker& tracker, const char* what, Call call) {
  try {
    call();
    return true;
  } catch (const c10::Error& error) {
    std::fprintf(stderr, "accel: tracker '%s' failed in %s: %s; it is stopped, training goes on\n",
                 tracker.name().c_str(), what, error.what_without_backtrace());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "accel: tracker '%s' failed in %s: %s; it is stopped, training goes on\n",
                 tracker.name().c_str(), what, error.what());
  }
  return false;
}

}  // namespace

// ---- The run's trackers -------------------------------------------------------------------------

namespace tracking {

void Trackers::init(const TrackerStart& start) {
  TORCH_CHECK(!initialized_, "accel: init_trackers was called already (project '",
              start.project_name,
              "'); a run is tracked once: call end_training() before tracking another");
  const std::string& name = start.project_name;
  TORCH_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
              "accel: init_trackers needs a project name that is a single folder name, got '", name,
              "'");
  initialized_ = true;
  if (!main_process_) return;

  std::vector<std::shared_ptr<GeneralTracker>> candidates;
  for (const auto& builtin : start.builtin) {
    candidates.push_back(tracking::make_builtin_tracker(builtin));
  }
  for (const auto& tracker : start.custom) {
    TORCH_CHECK(tracker != nullptr, "accel: AcceleratorOptions::trackers holds a null tracker");
    candidates.push_back(tracker);
  }
  for (auto& tracker : candidates) {
    auto found = start.init_kwargs.find(tracker->name());
    const TrackerValues options =
        found == start.init_kwargs.end() ? TrackerValues{} : found->second;
    bool started = guarded(*tracker, "init_trackers", [&] {
      tracker->start(name, start.logging_dir, options);
      tracker->store_init_configuration(start.config);
    });
    if (started) started_.push_back(tracker);
  }
}

void Trackers::log(const TrackerValues& values, std::optional<int64_t> step) {
  if (!main_process_ || started_.empty()) return;
  // Trackers record finite numbers: a NaN or an infinity is named and left out, not written.
  TrackerValues finite;
  for (const auto& entry : values) {
    if (entry.second.is_number() && !std::isfinite(entry.second.number())) {
      std::fprintf(stderr, "accel: log: '%s'%s is %s, which trackers do not record; left out\n",
                   entry.first.c_str(), step ? (" at step " + std::to_string(*step)).c_str() : "",
                   entry.second.text().c_str());
      continue;
    }
    finite.push_back(entry);
  }
  for (size_t i = 0; i < started_.size();) {
    auto& tracker = *started_[i];
    if (guarded(tracker, "log", [&] { tracker.log(finite, step); })) {
      ++i;
    } else {
      started_.erase(started_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

GeneralTracker& Trackers::get(const std::string& name) {
  if (!main_process_) {
    static BlankTracker blank;
    return blank;
  }
  std::string names;
  for (auto& tracker : started_) {
    if (tracker->name() == name) return *tracker;
    names += (names.empty() ? "" : ", ") + tracker->name();
  }
  TORCH_CHECK(false, "accel: no started tracker is called '", name,
              "' (started: ", names.empty() ? "none; call init_trackers first" : names, ")");
  return *started_.front();  // not reached
}

void Trackers::end() {
  for (auto& tracker : started_) guarded(*tracker, "end_training", [&] { tracker->finish(); });
  started_.clear();
  initialized_ = false;
}

}  // namespace tracking

}  // namespace accel
