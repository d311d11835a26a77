// The launcher's reading of flight records and its verdict on them: what proves a hang, what
// only warns, and a malformed record named with its file.

#include "flight_table.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace {

using accel::launcher::EntryState;
using accel::launcher::FlightEntry;
using accel::launcher::FlightRecord;
using accel::launcher::judge_flight_records;
using accel::launcher::read_flight_record;

FlightEntry entry(uint64_t seq, const std::string& call, bool waiting, int64_t start = 1000) {
  FlightEntry e;
  e.group = "gloo";
  e.seq = seq;
  e.op = "allreduce";
  e.call = call;
  e.state = waiting ? EntryState::waiting : EntryState::done;
  e.start_ms = start;
  e.end_ms = waiting ? -1 : start + 1;
  return e;
}

FlightRecord record(int rank, std::vector<FlightEntry> entries) {
  FlightRecord r;
  r.rank = rank;
  r.entries = std::move(entries);
  return r;
}

TEST(FlightTable, TwoCallsAtOneSequenceNumberAreAProvenMismatch) {
  const auto verdict = judge_flight_records(
      {{0, record(0, {entry(56, "gather_for_metrics", false), entry(57, "save_state", true)})},
       {1, record(1, {entry(56, "gather_for_metrics", false), entry(57, "backward", true)})}},
      {}, {0, 1}, 6000);
  EXPECT_TRUE(verdict.waiting);
  EXPECT_TRUE(verdict.proven);
  EXPECT_TRUE(verdict.mismatched);
  EXPECT_NE(verdict.table.find("rank 0 waits in #57 save_state; rank 1 entered #57 in another "
                               "call: backward"),
            std::string::npos)
      << verdict.table;
  EXPECT_NE(verdict.table.find("#56 gather_for_metrics"), std::string::npos) << verdict.table;
  EXPECT_NE(verdict.table.find("5.0 s"), std::string::npos) << verdict.table;
}

TEST(FlightTable, APeerThatHasNotArrivedYetOnlyWarns) {
  const auto verdict = judge_flight_records(
      {{0, record(0, {entry(3, "wait_for_everyone", false)})},
       {1, record(1, {entry(3, "wait_for_everyone", false), entry(4, "wait_for_everyone", true)})}},
      {}, {0, 1}, 9000);
  EXPECT_TRUE(verdict.waiting);
  EXPECT_FALSE(verdict.proven);
  EXPECT_NE(verdict.table.find("rank 0 has not entered it yet (last seen in #3 "
                               "wait_for_everyone)"),
            std::string::npos)
      << verdict.table;
}

TEST(FlightTable, APeerThatExitedOrIsPastTheNumberProvesIt) {
  const auto exited = judge_flight_records(
      {{0, record(0, {entry(3, "gather", false)})},
       {1, record(1, {entry(3, "gather", false), entry(4, "wait_for_everyone", true)})}},
      {{0, "exited with code 0"}}, {0, 1}, 9000);
  EXPECT_TRUE(exited.proven);
  EXPECT_FALSE(exited.mismatched);
  EXPECT_NE(exited.table.find("rank 0 exited with code 0 after finishing #3 gather and will "
                              "never enter it"),
            std::string::npos)
      << exited.table;
  // Rank 0's record no longer holds #4 (the last N are kept) but it is at #90.
  const auto past = judge_flight_records({{0, record(0, {entry(90, "backward", true)})},
                                          {1, record(1, {entry(4, "wait_for_everyone", true)})}},
                                         {}, {0, 1}, 9000);
  EXPECT_TRUE(past.proven);
  EXPECT_NE(past.table.find("rank 0 is past it"), std::string::npos) << past.table;
}

TEST(FlightTable, AProcessWhoseConnectionToAPeerFailedIsNamedAsFailed) {
  // What the runtime records when Gloo loses a peer between collectives (flight_recorder.cpp):
  // the launcher then names another machine's failure, if one is reported, as the cause.
  FlightEntry lost = entry(8, "between collectives", false);
  lost.op = "connection";
  lost.state = EntryState::failed;
  lost.error = "Read error [127.0.0.1]:4242: Connection reset by peer";
  const auto verdict =
      judge_flight_records({{0, record(0, {entry(7, "backward, gradient bucket 0", false), lost})},
                            {1, record(1, {entry(7, "backward, gradient bucket 0", false)})}},
                           {{0, "was killed by signal 6 (SIGABRT)"}}, {0, 1}, 2000);
  EXPECT_TRUE(verdict.failed);
  EXPECT_EQ(verdict.failed_ranks, (std::set<int>{0})) << verdict.table;
  EXPECT_NE(verdict.table.find("#8 between collectives (failed: Read error"), std::string::npos)
      << verdict.table;
}

TEST(FlightTable, NobodyWaitingIsNoHang) {
  const auto verdict =
      judge_flight_records({{0, record(0, {entry(1, "gather", false)})}}, {}, {0, 1}, 2000);
  EXPECT_FALSE(verdict.waiting);
  EXPECT_FALSE(verdict.proven);
  EXPECT_NE(verdict.table.find("(no record)"), std::string::npos) << verdict.table;
}

TEST(FlightTable, RecordsAreReadBackAndABadOneIsNamed) {
  const std::string path = ::testing::TempDir() + "flight-table-rank-0.record";
  {
    std::ofstream out(path);
    out << "accel-flight-record 1\nrank 0\npid 12\nwritten_ms 5000\nwatchdog_ms 3000\n"
        << "entry\tgloo\t7\tallreduce\t4000\t-1\twaiting\tbackward, gradient bucket 0\t"
           "Float[41]\t\n";
  }
  std::string error;
  const auto read = read_flight_record(path, &error);
  ASSERT_TRUE(read.has_value()) << error;
  EXPECT_EQ(read->rank, 0);
  EXPECT_EQ(read->watchdog_ms, 3000);
  ASSERT_EQ(read->entries.size(), 1u);
  EXPECT_EQ(read->entries[0].seq, 7u);
  EXPECT_EQ(read->entries[0].call, "backward, gradient bucket 0");
  EXPECT_EQ(read->entries[0].shapes, "Float[41]");
  EXPECT_EQ(read->entries[0].state, EntryState::waiting);

  { std::ofstream(path) << "accel-flight-record 1\nentry\tgloo\tseven\tallreduce\n"; }
  EXPECT_FALSE(read_flight_record(path, &error).has_value());
  EXPECT_NE(error.find(path + ": malformed entry"), std::string::npos) << error;
  { std::ofstream(path) << "{\"json\": true}\n"; }
  EXPECT_FALSE(read_flight_record(path, &error).has_value());
  EXPECT_NE(error.find("not a flight record"), std::string::npos) << error;
  std::remove(path.c_str());
  EXPECT_FALSE(read_flight_record(path, &error).has_value());
  EXPECT_NE(error.find("no record"), std::string::npos) << error;
}

}  // namespace
