// Experiment tracking on the Accelerator: init_trackers, log, get_tracker, end_training. Trackers
// run on the main process; one that fails is stopped and reported, and training goes on.

#include <accel/accelerator.h>
#include <accel/tracking.h>

#include "builtin_trackers.h"
#include "core/accelerator_impl.h"

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

// ---- The Accelerator's side ---------------------------------------------------------------------

void Accelerator::init_trackers(const std::string& project_name, const TrackerValues& config,
                                const std::map<std::string, TrackerValues>& init_kwargs) {
  TORCH_CHECK(!impl_->trackers_initialized, "accel: init_trackers was called already (project '",
              project_name,
              "'); a run is tracked once: call end_training() before tracking another");
  TORCH_CHECK(!project_name.empty() && project_name.find('/') == std::string::npos &&
                  project_name != "." && project_name != "..",
              "accel: init_trackers needs a project name that is a single folder name, got '",
              project_name, "'");
  impl_->trackers_initialized = true;
  if (!is_main_process()) return;
  const auto& project = impl_->project;
  const std::string logging_dir =
      project.logging_dir().empty() ? project.project_dir() : project.logging_dir();

  std::vector<std::shared_ptr<GeneralTracker>> candidates;
  for (const auto& name : impl_->options.log_with) {
    candidates.push_back(detail::make_builtin_tracker(name));
  }
  for (const auto& tracker : impl_->options.trackers) {
    TORCH_CHECK(tracker != nullptr, "accel: AcceleratorOptions::trackers holds a null tracker");
    candidates.push_back(tracker);
  }
  for (auto& tracker : candidates) {
    auto found = init_kwargs.find(tracker->name());
    const TrackerValues options = found == init_kwargs.end() ? TrackerValues{} : found->second;
    bool started = guarded(*tracker, "init_trackers", [&] {
      tracker->start(project_name, logging_dir, options);
      tracker->store_init_configuration(config);
    });
    if (started) impl_->trackers.push_back(tracker);
  }
}

void Accelerator::log(const TrackerValues& values, std::optional<int64_t> step) {
  if (!is_main_process() || impl_->trackers.empty()) return;
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
  auto& trackers = impl_->trackers;
  for (size_t i = 0; i < trackers.size();) {
    auto& tracker = *trackers[i];
    if (guarded(tracker, "log", [&] { tracker.log(finite, step); })) {
      ++i;
    } else {
      trackers.erase(trackers.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

GeneralTracker& Accelerator::get_tracker(const std::string& name) {
  if (!is_main_process()) {
    static BlankTracker blank;
    return blank;
  }
  std::string started;
  for (auto& tracker : impl_->trackers) {
    if (tracker->name() == name) return *tracker;
    started += (started.empty() ? "" : ", ") + tracker->name();
  }
  TORCH_CHECK(false, "accel: no started tracker is called '", name,
              "' (started: ", started.empty() ? "none; call init_trackers first" : started, ")");
  return *impl_->trackers.front();  // not reached
}

void Accelerator::end_training() {
  for (auto& tracker : impl_->trackers)
    guarded(*tracker, "end_training", [&] { tracker->finish(); });
  impl_->trackers.clear();
  impl_->trackers_initialized = false;
}

}  // namespace accel
