#pragma once

// The flight recorder: the last N collectives this process entered on each backend, so that a
// job stuck in a collective can say which call each process waits in (see docs/self-healing.md).
//
// Every backend of the job's groups is wrapped (record_collectives) the way c10d's
// ProcessGroupWrapper wraps one, so that the Reducer's bucket all-reduces and FULL_SHARD's
// gathers are recorded as well as the Accelerator's own calls. The accel call that issued a
// collective is named by the CollectiveLabel scopes on the issuing thread.
//
// A watchdog thread writes the record to $ACCEL_FLIGHT_RECORD_DIR/rank-R.record (set by
// `accel launch`) when it changed, at most once a second, and at once when a collective has
// waited longer than the watchdog time or failed; the launcher reads every process's record and
// prints who waits where. Without the launcher the record goes to stderr when it matters.

#include "environment.h"

#include "accel_common/flight_record.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>

namespace accel {
namespace distributed {

struct FlightSettings {
  size_t capacity = 64;                                         // ACCEL_FLIGHT_RECORDER; 0: off
  std::chrono::milliseconds watchdog{std::chrono::minutes(5)};  // ACCEL_HANG_WATCHDOG, seconds
  std::string record_dir;                                       // ACCEL_FLIGHT_RECORD_DIR
  int64_t rank = 0;
};

/// The settings from the environment; throws, naming the variable, on a malformed value.
FlightSettings flight_settings_from(const EnvLookup& env, int64_t rank);

/// Sets the process's recorder up. The first call wins: false when an earlier one set it up.
bool configure_flight_recorder(const FlightSettings& settings);

/// `inner`, recording every collective it is given under `name` ("gloo", "nccl", ...). With a
/// `checker` (a Gloo backend of the same processes, given under ACCEL_DEBUG), every process
/// first compares the call and shapes of each collective with the others' and throws, naming
/// both, when they differ. Returns `inner` itself when the recorder is off and there is no
/// checker.
c10::intrusive_ptr<c10d::Backend> record_collectives(
    c10::intrusive_ptr<c10d::Backend> inner, const std::string& name,
    c10::intrusive_ptr<c10d::Backend> checker = {});

/// The record as text (the format the launcher reads: accel_common/flight_record.h).
std::string flight_record_text();

/// Whether `error` is Gloo's lost connection to a peer (gloo::IoException, by its type), which
/// Gloo throws on its own threads when a peer's process ends.
bool is_lost_peer(const std::exception& error);

/// Writes one process's record files (flight::record_path, alert_path) for the recorder's two
/// writers, its watchdog thread and a failed collective's callback: each file whole
/// (util/durable_file.h, a temporary name per write), one write at a time, and never an older
/// record over a newer one (each carries its version).
class FlightRecordWriter {
 public:
  FlightRecordWriter(const std::string& dir, int64_t rank);

  /// Writes `record`, and with `alert` the alert file too, unless a newer version is written
  /// already; waits for a write under way at most `patience` (none: as long as it takes). False
  /// when nothing was written; never throws (a failed write leaves the previous record).
  bool write(const flight::FlightRecord& record, bool alert,
             std::optional<std::chrono::milliseconds> patience = std::nullopt);
  const std::string& record_path() const { return record_path_; }

 private:
  const std::string record_path_, alert_path_;
  std::timed_mutex mutex_;
  bool written_any_ = false;
  uint64_t written_version_ = 0;
};

}  // namespace distributed
}  // namespace accel
