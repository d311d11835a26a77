#pragma once

// The flight record's format, written by the runtime's recorder (each process's last collectives,
// runtime/src/distributed/flight_recorder.h) and read by the launcher (launcher/lib/flight_table.h)
// to say who waits where. One definition of both sides: the first line, the fields, the states
// and the files' names.
//
//   accel-flight-record 1
//   rank R / pid P / version V / written_ms T / watchdog_ms W     one "key value" line each
//   entry<TAB>group<TAB>seq<TAB>op<TAB>start_ms<TAB>end_ms<TAB>state<TAB>call<TAB>shapes<TAB>error

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace flight {

/// Where a collective stands: entered and not finished, finished, or finished with an error.
enum class EntryState { waiting, done, failed };
const char* to_string(EntryState state);

struct FlightEntry {
  std::string group, op, call, shapes, error;
  uint64_t seq = 0;
  int64_t start_ms = 0, end_ms = -1;
  EntryState state = EntryState::waiting;
};

struct FlightRecord {
  int rank = -1;
  int64_t pid = 0;
  /// Grows with every change the recorder makes: of two records of one process, the newer.
  uint64_t version = 0;
  int64_t written_ms = 0, watchdog_ms = 0;
  std::vector<FlightEntry> entries;
};

/// The record's text. An error keeps its first line, tabs turned to spaces.
std::string format_flight_record(const FlightRecord& record);
/// The record in `text`; nullopt, with `error` naming `source` and the problem, when it is not one.
std::optional<FlightRecord> parse_flight_record(const std::string& text, const std::string& source,
                                                std::string* error);
/// The record in the file `path`; nullopt, with `error` naming the file, when it is missing or
/// malformed.
std::optional<FlightRecord> read_flight_record(const std::string& path, std::string* error);

/// The files rank `rank` writes in the record folder: its record, rewritten as it changes, and
/// its alert, written when a collective waits past the watchdog or fails.
std::string record_path(const std::string& dir, int64_t rank);
std::string alert_path(const std::string& dir, int64_t rank);

}  // namespace flight
}  // namespace accel
