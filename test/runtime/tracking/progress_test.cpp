// The progress bar's lines (tqdm's layout), its pacing off a terminal, which process draws it,
// and accel::progress over a range. The bar on a real terminal is tested by
// test/runtime/tracking/progress/progress_in_terminal.sh (tmux).

#include <accel/progress.h>

#include "support/env_guard.h"

#include <accel_common/progress_bar.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

using accel_test::EnvGuard;
namespace progress_bar = accel::progress_bar;

namespace {

progress_bar::Snapshot snapshot(int64_t count, std::optional<int64_t> total, double elapsed) {
  progress_bar::Snapshot s;
  s.description = "train";
  s.count = count;
  s.total = total;
  s.elapsed_seconds = elapsed;
  return s;
}

// Everything written to a pipe's write end, once it is closed.
std::string drain(int read_fd) {
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(read_fd, buffer, sizeof(buffer))) > 0) text.append(buffer, n);
  return text;
}

}  // namespace

TEST(Progress, Durations) {
  EXPECT_EQ(progress_bar::format_duration(0), "00:00");
  EXPECT_EQ(progress_bar::format_duration(7.9), "00:07");
  EXPECT_EQ(progress_bar::format_duration(723), "12:03");
  EXPECT_EQ(progress_bar::format_duration(3723), "1:02:03");
}

TEST(Progress, TerminalLineHasTqdmsLayoutAndFillsTheWidth) {
  auto s = snapshot(42, 100, 3.5);
  s.postfix = "loss=0.12";
  const std::string line = progress_bar::terminal_line(s, 80, /*unicode=*/false);
  EXPECT_EQ(line.rfind("train:  42%|", 0), 0u) << line;
  EXPECT_NE(line.find("| 42/100 [00:03<00:04, 12.00it/s, loss=0.12]"), std::string::npos) << line;
  EXPECT_EQ(line.size(), 80u) << line;
  // 42% of the bar's cells are full, with a partial cell after them.
  const auto cells = line.substr(12, line.find("| 42/100") - 12);
  EXPECT_EQ(std::count(cells.begin(), cells.end(), '#'),
            static_cast<long>(cells.size() * 42 / 100));

  const std::string unicode = progress_bar::terminal_line(snapshot(100, 100, 2), 60, true);
  EXPECT_NE(unicode.find("100%|██"), std::string::npos) << unicode;
  EXPECT_EQ(unicode.find(' ', unicode.find('|')), unicode.find("| 100/100") + 1) << unicode;
}

TEST(Progress, NarrowTerminalsAndUnknownTotals) {
  const std::string narrow = progress_bar::terminal_line(snapshot(5, 10, 1), 20, false);
  EXPECT_LE(narrow.size(), 20u);
  EXPECT_EQ(narrow.rfind("train:  50%", 0), 0u) << narrow;
  const std::string open = progress_bar::terminal_line(snapshot(30, std::nullopt, 2), 80, false);
  EXPECT_EQ(open, "train: 30it [00:02, 15.00it/s]");
  EXPECT_EQ(progress_bar::plain_line(snapshot(3, 4, 30)),
            "train: 3/4 (75%) [00:30<00:10, 10.00s/it]");
  EXPECT_EQ(progress_bar::plain_line(snapshot(0, 4, 0)), "train: 0/4 (0%) [00:00<?, ?it/s]");
}

TEST(Progress, OffATerminalWritesALineEachTenthAndAtTheEnd) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    progress_bar::Renderer::Settings settings;
    settings.description = "merge";
    settings.total = 100;
    settings.fd = fds[1];
    progress_bar::Renderer bar(settings);
    EXPECT_FALSE(bar.terminal());
    for (int i = 0; i < 100; ++i) bar.update();
  }
  ::close(fds[1]);
  const std::string out = drain(fds[0]);
  ::close(fds[0]);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 11) << out;  // 0%, 10%..90%, 100%
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_NE(out.find("merge: 100/100 (100%)"), std::string::npos) << out;
}

TEST(Progress, OnATerminalRedrawsInPlaceAndLogLinesClearIt) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    progress_bar::Renderer::Settings settings;
    settings.total = 3;
    settings.fd = fds[1];
    settings.terminal = true;
    settings.terminal_interval = std::chrono::milliseconds(0);
    progress_bar::Renderer bar(settings);
    bar.update();
    { progress_bar::LiveLineClearance clear; }  // what a log line does around itself
    bar.update(2);
  }
  ::close(fds[1]);
  const std::string out = drain(fds[0]);
  ::close(fds[0]);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one line, ended at the finish";
  EXPECT_NE(out.find("]\033[K\r\033[K"), std::string::npos) << "the clearance erased the line";
  EXPECT_NE(out.find("3/3 ["), std::string::npos);
}

TEST(Progress, OnlyTheLocalMainProcessDraws) {
  {
    EnvGuard rank("RANK", "1"), size("WORLD_SIZE", "2"), local("LOCAL_RANK", "1"),
        local_size("LOCAL_WORLD_SIZE", "2");
    EXPECT_FALSE(accel::ProgressBar(10).visible());
    EXPECT_TRUE(
        accel::ProgressBar(10, accel::ProgressOptions().main_process_only(false)).visible());
  }
  EXPECT_TRUE(accel::ProgressBar(10).visible());
  EXPECT_FALSE(accel::ProgressBar(10, accel::ProgressOptions().disable(true)).visible());
}

TEST(Progress, RangeCountsEveryElement) {
  std::vector<int> values{1, 2, 3, 4, 5};
  int sum = 0;
  auto range = accel::progress(values, accel::ProgressOptions().disable(true));
  for (int value : range) sum += value;
  EXPECT_EQ(sum, 15);
  EXPECT_EQ(range.bar().count(), 5);
}

TEST(Progress, PostfixShowsRealsShortAndIntegersWhole) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    const int saved = ::dup(2);
    ::dup2(fds[1], 2);
    accel::ProgressBar bar(2, accel::ProgressOptions().main_process_only(false));
    bar.set_postfix({{"loss", 0.123456789}, {"step", int64_t{1000000}}, {"ok", true}});
    bar.update(2);
    bar.close();
    ::dup2(saved, 2);
    ::close(saved);
  }
  ::close(fds[1]);
  const std::string out = drain(fds[0]);
  ::close(fds[0]);
  EXPECT_NE(out.find("loss=0.123457, step=1000000, ok=true]"), std::string::npos) << out;
}
