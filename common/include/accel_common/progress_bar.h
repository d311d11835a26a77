#pragma once

// A progress bar for long loops (tqdm's layout), shared by the runtime's accel::ProgressBar and
// the accel commands that take long. On a terminal it is redrawn in place; elsewhere (a CI log, a
// pipe) it becomes a plain line now and then, so a log is not flooded with carriage returns.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace accel {
namespace progress_bar {

/// What one rendering of a bar shows.
struct Snapshot {
  std::string description;
  int64_t count = 0;
  std::optional<int64_t> total;  // unknown: no percentage, bar or ETA
  double elapsed_seconds = 0;
  std::string unit = "it";
  std::string postfix;  // "loss=0.12"
};

/// "00:07", "12:03", "1:02:03".
std::string format_duration(double seconds);
/// The line for a terminal `width` columns wide, in tqdm's layout:
/// "train:  42%|████▏     | 42/100 [00:03<00:04, 12.30it/s, loss=0.12]". `unicode` false draws
/// the bar with '#' and digits. Never wider than `width`.
std::string terminal_line(const Snapshot& snapshot, int width, bool unicode);
/// The line for a log: "train: 42/100 (42%) [00:03<00:04, 12.30it/s, loss=0.12]".
std::string plain_line(const Snapshot& snapshot);

/// Draws one bar on a file descriptor.
class Renderer {
 public:
  struct Settings {
    std::string description;
    std::optional<int64_t> total;
    std::string unit = "it";
    int fd = 2;  // stderr, as tqdm
    /// false: draws nothing (another process's bar, or the program asked for silence).
    bool enabled = true;
    /// Redraw in place; unset: whether `fd` is a terminal.
    std::optional<bool> terminal;
    /// Least time between redraws on a terminal.
    std::chrono::milliseconds terminal_interval{100};
    /// Off a terminal, a line at each tenth of the total and at least this often.
    std::chrono::milliseconds plain_interval{30000};
  };

  explicit Renderer(Settings settings);
  /// Draws the final state (see finish()).
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  /// Counts `n` more steps and redraws when it is time.
  void update(int64_t n = 1);
  /// Text shown after the rate ("loss=0.12"); drawn at the next redraw.
  void set_postfix(std::string postfix);
  void set_description(std::string description);
  /// Draws the final state and ends the line; later updates draw nothing. Called once.
  void finish();

  int64_t count() const { return count_; }
  bool terminal() const { return terminal_; }
  bool enabled() const { return settings_.enabled; }
  /// The state now (for tests and for a caller's own line).
  Snapshot snapshot() const;

  /// Erases the bar's terminal line (a log line is about to be written) / draws it again.
  void clear_line();
  void redraw();

 private:
  void draw(bool final);
  void write(const std::string& text) const;

  Settings settings_;
  bool terminal_ = false;
  bool unicode_ = false;
  bool finished_ = false;
  int64_t count_ = 0;
  std::string postfix_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  int64_t last_plain_tenth_ = 0;
};

/// While it lives, the bar being redrawn in place on this process's terminal (if any) is erased,
/// so that a log line does not land in the middle of it; it is redrawn at the end.
class LiveLineClearance {
 public:
  LiveLineClearance();
  ~LiveLineClearance();
  LiveLineClearance(const LiveLineClearance&) = delete;
  LiveLineClearance& operator=(const LiveLineClearance&) = delete;

 private:
  Renderer* cleared_ = nullptr;
};

}  // namespace progress_bar
}  // namespace accel
