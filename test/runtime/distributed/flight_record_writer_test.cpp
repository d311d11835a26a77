// The flight recorder's file writes (distributed/flight_recorder.h's FlightRecordWriter), as its
// two writers use them at once: the watchdog thread and a failed collective's callback, writing
// the same rank's record. A reader must always find a whole record, never an older one after a
// newer one, and in the end the newest.

#include "distributed/flight_recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

accel::flight::FlightRecord record_of(uint64_t version) {
  accel::flight::FlightRecord record;
  record.rank = 0;
  record.version = version;
  // A few kilobytes, so that a torn write would show as a cut or mixed record.
  for (int i = 0; i < 40; ++i) {
    accel::flight::FlightEntry entry;
    entry.group = "gloo";
    entry.seq = version * 100 + static_cast<uint64_t>(i);
    entry.op = "allreduce";
    entry.call =
        "backward, gradient bucket " + std::to_string(i) + " of version " + std::to_string(version);
    entry.shapes = "Float[1024, 1024]";
    entry.state = accel::flight::EntryState::done;
    record.entries.push_back(entry);
  }
  return record;
}

TEST(FlightRecordWriter, TwoThreadsWritingOneRecordLeaveItWholeAndNewest) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("flight-writer-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  accel::distributed::FlightRecordWriter writer(dir.string(), 0);
  constexpr int kWritesPerThread = 150;
  std::atomic<uint64_t> next_version{0};
  std::atomic<bool> writing{true};

  // Each writer takes its snapshot's version, then writes: the two interleave between the
  // numbering and the write, as the recorder's threads do between unlocking and writing.
  auto write_many = [&](bool alert) {
    for (int i = 0; i < kWritesPerThread; ++i) {
      const uint64_t version = ++next_version;
      if (i % 7 == 0) std::this_thread::yield();
      writer.write(record_of(version), alert && i % 10 == 0);
    }
  };
  std::vector<std::string> problems;
  uint64_t reads = 0;
  std::thread reader([&] {
    uint64_t last_seen = 0;
    while (writing) {
      std::string error;
      if (!fs::exists(writer.record_path())) continue;
      auto read = accel::flight::read_flight_record(writer.record_path(), &error);
      ++reads;
      if (!read) {
        if (error.find("no record") == std::string::npos) problems.push_back(error);
        continue;
      }
      if (read->version < last_seen) {
        problems.push_back("version " + std::to_string(read->version) + " after " +
                           std::to_string(last_seen));
      }
      if (read->entries.size() != 40 || read->entries.back().seq != read->version * 100 + 39) {
        problems.push_back("a record mixing two writes at version " +
                           std::to_string(read->version));
      }
      last_seen = std::max(last_seen, read->version);
    }
  });
  std::thread watchdog(write_many, false);
  std::thread callback(write_many, true);
  watchdog.join();
  callback.join();
  writing = false;
  reader.join();

  EXPECT_TRUE(problems.empty()) << problems.size() << " bad reads of " << reads
                                << ", first: " << problems.front();
  std::string error;
  const auto last = accel::flight::read_flight_record(writer.record_path(), &error);
  ASSERT_TRUE(last.has_value()) << error;
  EXPECT_EQ(last->version, 2u * kWritesPerThread);
  EXPECT_TRUE(fs::exists(accel::flight::alert_path(dir.string(), 0)));
  // Every temporary file was renamed into place or removed.
  for (const auto& file : fs::directory_iterator(dir)) {
    EXPECT_EQ(file.path().string().find(".tmp."), std::string::npos) << file.path();
  }
  fs::remove_all(dir);
}

TEST(FlightRecordWriter, AnOlderRecordIsNotWrittenOverANewerOne) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("flight-order-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  accel::distributed::FlightRecordWriter writer(dir.string(), 3);
  EXPECT_TRUE(writer.write(record_of(5), false));
  EXPECT_FALSE(writer.write(record_of(4), true));  // a snapshot taken before the failure's
  EXPECT_FALSE(fs::exists(accel::flight::alert_path(dir.string(), 3)));
  EXPECT_TRUE(writer.write(record_of(5), false));  // the same version again: rewritten
  std::string error;
  const auto read = accel::flight::read_flight_record(writer.record_path(), &error);
  ASSERT_TRUE(read.has_value()) << error;
  EXPECT_EQ(read->version, 5u);
  EXPECT_EQ(writer.record_path(), accel::flight::record_path(dir.string(), 3));
  fs::remove_all(dir);
}

}  // namespace
