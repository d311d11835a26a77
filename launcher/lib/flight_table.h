#pragma once

// The launcher's side of the flight recorder (runtime/src/distributed/flight_recorder.h): reads
// each process's record (accel_common/flight_record.h) from the folder it gave them, decides
// whether the records prove that the job can never finish, and prints one table of who waits where.

#include "accel_common/flight_record.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace accel {
namespace launcher {

using flight::EntryState;
using flight::FlightEntry;
using flight::FlightRecord;
using flight::read_flight_record;

struct HangVerdict {
  bool waiting = false;        // some process waits in a collective
  bool failed = false;         // some process's collective failed (a peer went away)
  bool proven = false;         // and the records prove it will never finish
  bool mismatched = false;     // two processes entered one collective number in different calls
  std::set<int> failed_ranks;  // the processes whose collective failed
  std::string table;           // one line per process, then why
};

/// Judges the records of this machine's processes. `exited`: ranks that have ended, with how
/// ("exited with code 0"). A process that waits is proven stuck when a peer has exited, when a
/// peer entered the same collective number with another call (or shapes), or when a peer is
/// past it; a peer that has not reached it yet proves nothing (a slow save, a long evaluation).
HangVerdict judge_flight_records(const std::map<int, FlightRecord>& records,
                                 const std::map<int, std::string>& exited,
                                 const std::vector<int>& ranks, int64_t now_ms);

/// The folder the processes of one group start write their records to (exported to them as
/// ACCEL_FLIGHT_RECORD_DIR, so create it before they start), removed with this object.
class FlightWatch {
 public:
  explicit FlightWatch(std::vector<int> ranks);
  ~FlightWatch();
  FlightWatch(const FlightWatch&) = delete;
  FlightWatch& operator=(const FlightWatch&) = delete;

  /// A verdict when a process has raised an alert (a collective past its watchdog, or one that
  /// failed) since the last call; nullopt otherwise. Cheap: one access() per process.
  std::optional<HangVerdict> poll(const std::map<int, std::string>& exited);
  /// What the records say now; nullopt when no process has written one.
  std::optional<HangVerdict> judge_now(const std::map<int, std::string>& exited);
  /// The same once every rank of `running` has written a record, or after `patience` (a process
  /// writes its record within a second of entering a collective, at once when one fails).
  std::optional<HangVerdict> judge_when_written(const std::map<int, std::string>& exited,
                                                const std::vector<int>& running,
                                                std::chrono::milliseconds patience);

 private:
  std::string dir_;
  std::vector<int> ranks_;
};

}  // namespace launcher
}  // namespace accel
