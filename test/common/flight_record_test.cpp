// The flight record's one format (accel_common/flight_record.h): what the runtime's recorder
// writes is what the launcher reads back, field for field, and a record that is not whole or not
// one is refused with the file and the problem named.

#include "accel_common/flight_record.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace {

using accel::flight::EntryState;
using accel::flight::FlightEntry;
using accel::flight::FlightRecord;

FlightRecord sample() {
  FlightRecord record;
  record.rank = 3;
  record.pid = 4242;
  record.version = 17;
  record.written_ms = 1700000000123;
  record.watchdog_ms = 300000;
  for (auto state : {EntryState::done, EntryState::failed, EntryState::waiting}) {
    FlightEntry e;
    e.group = state == EntryState::waiting ? "nccl" : "gloo";
    e.seq = 7 + static_cast<uint64_t>(record.entries.size());
    e.op = "allreduce";
    e.call = "backward, gradient bucket 0";
    e.shapes = "Float[41] Float[3, 4]";
    e.start_ms = 1000;
    e.end_ms = state == EntryState::waiting ? -1 : 1005;
    e.state = state;
    if (state == EntryState::failed) e.error = "Connection reset by peer";
    record.entries.push_back(e);
  }
  return record;
}

TEST(FlightRecord, WhatIsWrittenIsReadBackFieldForField) {
  const auto written = sample();
  std::string error;
  const auto read =
      accel::flight::parse_flight_record(accel::flight::format_flight_record(written), "x", &error);
  ASSERT_TRUE(read.has_value()) << error;
  EXPECT_EQ(read->rank, written.rank);
  EXPECT_EQ(read->pid, written.pid);
  EXPECT_EQ(read->version, written.version);
  EXPECT_EQ(read->written_ms, written.written_ms);
  EXPECT_EQ(read->watchdog_ms, written.watchdog_ms);
  ASSERT_EQ(read->entries.size(), written.entries.size());
  for (size_t i = 0; i < written.entries.size(); ++i) {
    const auto& a = written.entries[i];
    const auto& b = read->entries[i];
    EXPECT_EQ(a.group, b.group);
    EXPECT_EQ(a.seq, b.seq);
    EXPECT_EQ(a.op, b.op);
    EXPECT_EQ(a.call, b.call);
    EXPECT_EQ(a.shapes, b.shapes);
    EXPECT_EQ(a.start_ms, b.start_ms);
    EXPECT_EQ(a.end_ms, b.end_ms);
    EXPECT_EQ(a.state, b.state);
    EXPECT_EQ(a.error, b.error);
  }
}

TEST(FlightRecord, AnErrorKeepsItsFirstLineWithoutTabs) {
  auto record = sample();
  record.entries[1].error = "a\tb\nsecond line";
  std::string error;
  const auto read =
      accel::flight::parse_flight_record(accel::flight::format_flight_record(record), "x", &error);
  ASSERT_TRUE(read.has_value()) << error;
  EXPECT_EQ(read->entries[1].error, "a b");
}

TEST(FlightRecord, AMalformedRecordIsNamedWithItsProblem) {
  const std::string whole = accel::flight::format_flight_record(sample());
  struct Case {
    const char* what;
    std::string text;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"another file", "{\"json\": true}\n", "not a flight record"},
      {"cut short", whole.substr(0, whole.size() - 5), "cut short"},
      {"a bad number",
       "accel-flight-record 1\nrank 0\nentry\tgloo\tseven\tallreduce\t1\t2\tdone"
       "\tc\ts\t\n",
       "malformed entry"},
      {"an unknown state",
       "accel-flight-record 1\nrank 0\nentry\tgloo\t7\tallreduce\t1\t2\tstuck\tc\ts\t\n",
       "malformed entry"},
      {"too few fields", "accel-flight-record 1\nrank 0\nentry\tgloo\t7\tallreduce\n",
       "malformed entry"},
      {"a bad field", "accel-flight-record 1\nrank zero\n", "malformed line 'rank zero'"},
      {"no rank", "accel-flight-record 1\npid 3\n", "no rank line"},
  };
  for (const auto& c : cases) {
    std::string error;
    EXPECT_FALSE(accel::flight::parse_flight_record(c.text, "rank-0.record", &error).has_value())
        << c.what;
    EXPECT_EQ(error.rfind("rank-0.record: ", 0), 0u) << c.what << ": " << error;
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.what << ": " << error;
  }
}

TEST(FlightRecord, FilesAreNamedByRankAndAMissingOneIsSaid) {
  EXPECT_EQ(accel::flight::record_path("/d", 2), "/d/rank-2.record");
  EXPECT_EQ(accel::flight::alert_path("/d", 2), "/d/rank-2.alert");
  const std::string path = ::testing::TempDir() + "flight-record-test.record";
  { std::ofstream(path) << accel::flight::format_flight_record(sample()); }
  std::string error;
  EXPECT_TRUE(accel::flight::read_flight_record(path, &error).has_value()) << error;
  std::remove(path.c_str());
  EXPECT_FALSE(accel::flight::read_flight_record(path, &error).has_value());
  EXPECT_EQ(error, path + ": no record (the process wrote none)");
}

}  // namespace
