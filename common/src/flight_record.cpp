#include "accel_common/flight_record.h"

#include "accel_common/name_table.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

namespace accel {
namespace flight {
namespace {

constexpr const char* kFirstLine = "accel-flight-record 1";
constexpr size_t kEntryFields = 10;

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, '\t')) fields.push_back(field);
  if (!line.empty() && line.back() == '\t') fields.emplace_back();
  return fields;
}

constexpr std::pair<EntryState, const char*> kStates[] = {
    {EntryState::waiting, "waiting"},
    {EntryState::done, "done"},
    {EntryState::failed, "failed"},
};

/// One entry line's fields; false when one is missing or not a number where one is expected.
bool parse_entry(const std::string& line, FlightEntry& entry) {
  const auto f = split_tabs(line);
  if (f.size() < kEntryFields) return false;
  const auto state = value_in<EntryState>(kStates, f[6]);
  if (!state) return false;
  try {
    size_t used = 0;
    entry.seq = std::stoull(f[2], &used);
    if (used != f[2].size()) return false;
    entry.start_ms = std::stoll(f[4], &used);
    if (used != f[4].size()) return false;
    entry.end_ms = std::stoll(f[5], &used);
    if (used != f[5].size()) return false;
  } catch (const std::exception&) {
    return false;
  }
  entry.group = f[1];
  entry.op = f[3];
  entry.state = *state;
  entry.call = f[7];
  entry.shapes = f[8];
  entry.error = f[9];
  return true;
}

/// A "key value" line into `record`; false when the value of a known key is not a number.
bool parse_field(const std::string& line, FlightRecord& record) {
  std::istringstream fields(line);
  std::string key;
  fields >> key;
  if (key == "rank") return static_cast<bool>(fields >> record.rank);
  if (key == "pid") return static_cast<bool>(fields >> record.pid);
  if (key == "version") return static_cast<bool>(fields >> record.version);
  if (key == "written_ms") return static_cast<bool>(fields >> record.written_ms);
  if (key == "watchdog_ms") return static_cast<bool>(fields >> record.watchdog_ms);
  return true;  // a field a later version added
}

}  // namespace

const char* to_string(EntryState state) { return name_in(kStates, state); }

std::string format_flight_record(const FlightRecord& record) {
  std::ostringstream out;
  out << kFirstLine << "\nrank " << record.rank << "\npid " << record.pid << "\nversion "
      << record.version << "\nwritten_ms " << record.written_ms << "\nwatchdog_ms "
      << record.watchdog_ms << "\n";
  for (const auto& e : record.entries) {
    std::string error = e.error.substr(0, e.error.find('\n'));
    std::replace(error.begin(), error.end(), '\t', ' ');
    out << "entry\t" << e.group << '\t' << e.seq << '\t' << e.op << '\t' << e.start_ms << '\t'
        << e.end_ms << '\t' << to_string(e.state) << '\t' << e.call << '\t' << e.shapes << '\t'
        << error << "\n";
  }
  return out.str();
}

std::optional<FlightRecord> parse_flight_record(const std::string& text, const std::string& source,
                                                std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<FlightRecord> {
    if (error != nullptr) *error = source + ": " + why;
    return std::nullopt;
  };
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kFirstLine) {
    return fail("not a flight record (first line '" + line + "')");
  }
  // The writer ends every line: a record cut short by a crash ends without one.
  if (text.back() != '\n') return fail("cut short (no end of line at its end)");
  FlightRecord record;
  while (std::getline(in, line)) {
    if (line.rfind("entry\t", 0) == 0) {
      FlightEntry entry;
      if (!parse_entry(line, entry)) return fail("malformed entry '" + line + "'");
      record.entries.push_back(std::move(entry));
    } else if (!parse_field(line, record)) {
      return fail("malformed line '" + line + "'");
    }
  }
  if (record.rank < 0) return fail("no rank line");
  return record;
}

std::optional<FlightRecord> read_flight_record(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (error != nullptr) *error = path + ": no record (the process wrote none)";
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_flight_record(text.str(), path, error);
}

std::string record_path(const std::string& dir, int64_t rank) {
  return dir + "/rank-" + std::to_string(rank) + ".record";
}

std::string alert_path(const std::string& dir, int64_t rank) {
  return dir + "/rank-" + std::to_string(rank) + ".alert";
}

}  // namespace flight
}  // namespace accel
