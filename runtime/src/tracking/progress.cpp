#include <accel/progress.h>

#include "distributed/environment.h"

#include <accel_common/progress_bar.h>

#include <sstream>

namespace accel {

ProgressBar::ProgressBar(std::optional<int64_t> total, ProgressOptions options) {
  progress_bar::Renderer::Settings settings;
  settings.description = options.description();
  settings.total = total;
  settings.unit = options.unit();
  settings.enabled = !options.disable();
  if (settings.enabled && options.main_process_only()) {
    settings.enabled =
        distributed::detect_process_identity(distributed::process_environment()).local_rank == 0;
  }
  renderer_ = std::make_unique<progress_bar::Renderer>(std::move(settings));
  if (options.initial() > 0) renderer_->update(options.initial());
}

ProgressBar::~ProgressBar() = default;
ProgressBar::ProgressBar(ProgressBar&&) noexcept = default;
ProgressBar& ProgressBar::operator=(ProgressBar&&) noexcept = default;

void ProgressBar::update(int64_t n) { renderer_->update(n); }

void ProgressBar::set_postfix(const TrackerValues& values) {
  std::ostringstream text;
  for (const auto& [name, value] : values) {
    if (text.tellp() > 0) text << ", ";
    text << name << '=';
    if (std::holds_alternative<double>(value.get())) {
      text << value.number();  // 6 significant digits, as tqdm's postfix shows floats
    } else {  // integers whole (an epoch of 1000000 is not 1e+06), booleans and text as they are
      text << value.text();
    }
  }
  renderer_->set_postfix(text.str());
}

void ProgressBar::set_description(std::string description) {
  renderer_->set_description(std::move(description));
}

void ProgressBar::close() { renderer_->finish(); }

int64_t ProgressBar::count() const { return renderer_->count(); }

bool ProgressBar::visible() const { return renderer_->enabled(); }

}  // namespace accel
