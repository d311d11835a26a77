#include "accel_common/progress_bar.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace accel {
namespace progress_bar {
namespace {

// The bar drawn in place on this process's terminal, if any (LiveLineClearance's target).
std::mutex live_mutex;
Renderer* live_renderer = nullptr;

std::string two_digits(int64_t value) {
  char text[8];
  std::snprintf(text, sizeof(text), "%02lld", static_cast<long long>(value));
  return text;
}

std::string rate_text(const Snapshot& s) {
  if (s.elapsed_seconds <= 0 || s.count == 0) return "?" + s.unit + "/s";
  const double rate = s.count / s.elapsed_seconds;
  char text[64];
  // Slow loops read better as seconds per step, as tqdm shows them.
  if (rate < 1) {
    std::snprintf(text, sizeof(text), "%.2fs/%s", 1 / rate, s.unit.c_str());
  } else {
    std::snprintf(text, sizeof(text), "%.2f%s/s", rate, s.unit.c_str());
  }
  return text;
}

// "[00:03<00:04, 12.30it/s, loss=0.12]"
std::string timing_text(const Snapshot& s) {
  std::string text = "[" + format_duration(s.elapsed_seconds);
  if (s.total) {
    text += "<";
    if (s.count > 0 && s.elapsed_seconds > 0) {
      const double remaining =
          std::max<int64_t>(*s.total - s.count, 0) * s.elapsed_seconds / s.count;
      text += format_duration(remaining);
    } else {
      text += "?";
    }
  }
  text += ", " + rate_text(s);
  if (!s.postfix.empty()) text += ", " + s.postfix;
  return text + "]";
}

std::string prefix_text(const Snapshot& s) {
  return s.description.empty() ? std::string() : s.description + ": ";
}

double fraction_of(const Snapshot& s) {
  if (!s.total || *s.total <= 0) return 0;
  return std::clamp(static_cast<double>(s.count) / static_cast<double>(*s.total), 0.0, 1.0);
}

// `cells` columns filled to `fraction`, with eighths (or digits) for the partial cell.
std::string bar_cells(double fraction, int cells, bool unicode) {
  static const char* const eighths[] = {" ", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const double filled = fraction * cells;
  const int whole = static_cast<int>(filled);
  std::string text;
  for (int i = 0; i < whole; ++i) text += unicode ? "█" : "#";
  if (whole < cells) {
    const double partial = filled - whole;
    if (unicode) {
      text += eighths[static_cast<int>(partial * 8)];
    } else {
      const int tenth = static_cast<int>(partial * 10);
      text += tenth == 0 ? ' ' : static_cast<char>('0' + tenth);
    }
    text.append(cells - whole - 1, ' ');
  }
  return text;
}

// Display columns of UTF-8 text (each code point one column: the bar's blocks are narrow).
int columns_of(const std::string& text) {
  int columns = 0;
  for (unsigned char c : text) columns += (c & 0xC0) != 0x80;
  return columns;
}

// Cuts UTF-8 text to `columns` code points.
std::string cut_to(const std::string& text, int columns) {
  int seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && seen++ == columns) {
      return text.substr(0, i);
    }
  }
  return text;
}

int terminal_width(int fd) {
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    const int value = std::atoi(columns);
    if (value > 0) return value;
  }
  return 80;
}

bool locale_is_utf8() {
  for (const char* name : {"LC_ALL", "LC_CTYPE", "LANG"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    std::string lower(value);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return lower.find("utf-8") != std::string::npos || lower.find("utf8") != std::string::npos;
  }
  return false;
}

}  // namespace

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(std::max(0.0, std::floor(seconds)));
  const int64_t hours = total / 3600, minutes = total / 60 % 60, rest = total % 60;
  if (hours > 0) return std::to_string(hours) + ":" + two_digits(minutes) + ":" + two_digits(rest);
  return two_digits(minutes) + ":" + two_digits(rest);
}

std::string terminal_line(const Snapshot& s, int width, bool unicode) {
  const std::string prefix = prefix_text(s);
  const std::string timing = timing_text(s);
  if (!s.total) {
    return cut_to(prefix + std::to_string(s.count) + s.unit + " " + timing, width);
  }
  const double fraction = fraction_of(s);
  char percent[8];
  std::snprintf(percent, sizeof(percent), "%3d%%", static_cast<int>(fraction * 100));
  const std::string counts = " " + std::to_string(s.count) + "/" + std::to_string(*s.total) + " ";
  const std::string left = prefix + percent + "|";
  const std::string right = "|" + counts + timing;
  const int cells = width - columns_of(left) - columns_of(right);
  if (cells < 1) return cut_to(prefix + percent + counts + timing, width);
  return left + bar_cells(fraction, std::min(cells, 1000), unicode) + right;
}

std::string plain_line(const Snapshot& s) {
  std::string text = prefix_text(s) + std::to_string(s.count);
  if (s.total) {
    text += "/" + std::to_string(*s.total) + " (" +
            std::to_string(static_cast<int>(fraction_of(s) * 100)) + "%)";
  } else {
    text += s.unit;
  }
  return text + " " + timing_text(s);
}

Renderer::Renderer(Settings settings)
    : settings_(std::move(settings)), start_(std::chrono::steady_clock::now()), last_draw_(start_) {
  terminal_ = settings_.terminal.value_or(::isatty(settings_.fd) == 1);
  unicode_ = terminal_ && locale_is_utf8();
  if (!settings_.enabled) return;
  if (terminal_) {
    std::lock_guard<std::mutex> lock(live_mutex);
    if (live_renderer == nullptr) live_renderer = this;  // nested bars: the outer one is cleared
  }
  draw(false);
}

Renderer::~Renderer() {
  try {
    finish();
  } catch (...) {  // writing to a closed stream must not end the program
  }
}

void Renderer::update(int64_t n) {
  count_ += n;
  if (!settings_.enabled || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (terminal_) {
    if (now - last_draw_ >= settings_.terminal_interval) draw(false);
    return;
  }
  const int64_t tenth =
      settings_.total && *settings_.total > 0 ? count_ * 10 / *settings_.total : 0;
  if (tenth > last_plain_tenth_ || now - last_draw_ >= settings_.plain_interval) {
    last_plain_tenth_ = tenth;
    if (!settings_.total || count_ < *settings_.total) draw(false);  // the last one is finish()'s
  }
}

void Renderer::set_postfix(std::string postfix) { postfix_ = std::move(postfix); }

void Renderer::set_description(std::string description) {
  settings_.description = std::move(description);
}

void Renderer::finish() {
  if (finished_) return;
  finished_ = true;
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    if (live_renderer == this) live_renderer = nullptr;
  }
  if (settings_.enabled) draw(true);
}

Snapshot Renderer::snapshot() const {
  Snapshot s;
  s.description = settings_.description;
  s.count = count_;
  s.total = settings_.total;
  s.elapsed_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  s.unit = settings_.unit;
  s.postfix = postfix_;
  return s;
}

void Renderer::clear_line() {
  if (settings_.enabled && terminal_ && !finished_) write("\r\033[K");
}

void Renderer::redraw() {
  if (settings_.enabled && terminal_ && !finished_) draw(false);
}

void Renderer::draw(bool final) {
  last_draw_ = std::chrono::steady_clock::now();
  const Snapshot s = snapshot();
  if (terminal_) {
    write("\r" + terminal_line(s, terminal_width(settings_.fd) - 1, unicode_) + "\033[K" +
          (final ? "\n" : ""));
  } else {
    write(plain_line(s) + "\n");
  }
}

void Renderer::write(const std::string& text) const {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(settings_.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed or full stream loses the bar, not the program
    done += static_cast<size_t>(n);
  }
}

LiveLineClearance::LiveLineClearance() {
  std::lock_guard<std::mutex> lock(live_mutex);
  cleared_ = live_renderer;
  if (cleared_ != nullptr) cleared_->clear_line();
}

LiveLineClearance::~LiveLineClearance() {
  std::lock_guard<std::mutex> lock(live_mutex);
  if (cleared_ != nullptr && live_renderer == cleared_) cleared_->redraw();
}

}  // namespace progress_bar
}  // namespace accel
