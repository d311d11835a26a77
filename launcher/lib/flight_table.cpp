#include "flight_table.h"
#include "launch_output.h"

#include "accel_common/contract.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace accel {
namespace launcher {
namespace {

std::string describe(const FlightEntry& e) {
  std::string text = "#" + std::to_string(e.seq) + " " + e.call;
  if (!e.shapes.empty()) text += " [" + e.shapes + "]";
  if (e.group != "gloo") text += " (" + e.group + ")";
  return text;
}

std::string seconds(int64_t ms) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(ms) / 1000.0 << " s";
  return out.str();
}

// The collective a process is stuck in: the first still under way, or the first that failed.
const FlightEntry* first_open(const FlightRecord& r) {
  for (const auto& e : r.entries)
    if (e.state == EntryState::waiting || e.state == EntryState::failed) return &e;
  return nullptr;
}

const FlightEntry* last_finished(const FlightRecord& r, const std::string& group) {
  const FlightEntry* last = nullptr;
  for (const auto& e : r.entries)
    if (e.state == EntryState::done && (group.empty() || e.group == group)) last = &e;
  return last;
}

const FlightEntry* entry_at(const FlightRecord& r, const std::string& group, uint64_t seq) {
  for (const auto& e : r.entries)
    if (e.group == group && e.seq == seq) return &e;
  return nullptr;
}

uint64_t highest_seq(const FlightRecord& r, const std::string& group) {
  uint64_t highest = 0;
  for (const auto& e : r.entries)
    if (e.group == group && e.seq > highest) highest = e.seq;
  return highest;
}

}  // namespace

namespace {

// One line per process: the last collective it finished, the one it waits in (or failed in) and
// for how long, aligned in columns; how a process that has ended ended follows its line.
std::string process_table(const std::map<int, FlightRecord>& records,
                          const std::map<int, std::string>& exited, const std::vector<int>& ranks,
                          int64_t now_ms) {
  std::vector<std::array<std::string, 4>> rows{
      {"rank", "last collective finished", "waiting in (or failed in)", "for"}};
  std::vector<std::string> endings{""};
  for (int rank : ranks) {
    std::array<std::string, 4> row{std::to_string(rank), "(no record)", "-", "-"};
    if (auto it = records.find(rank); it != records.end()) {
      const FlightEntry* done = last_finished(it->second, "");
      const FlightEntry* open = first_open(it->second);
      row[1] = done ? describe(*done) : "none";
      if (open) {
        row[2] = describe(*open);
        if (open->state == EntryState::failed) row[2] += " (failed: " + open->error + ")";
        row[3] = seconds((open->end_ms >= 0 ? open->end_ms : now_ms) - open->start_ms);
      }
    }
    rows.push_back(std::move(row));
    auto gone = exited.find(rank);
    endings.push_back(gone == exited.end() ? "" : gone->second);
  }
  std::array<size_t, 4> widths{};
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  std::string table;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string line = " ";
    for (size_t i = 0; i < 4; ++i) {
      line += " " + rows[r][i];
      if (i < 3) line += std::string(widths[i] - rows[r][i].size(), ' ') + " |";
    }
    if (!endings[r].empty())
      line += std::string(widths[3] - rows[r][3].size(), ' ') + " | " + endings[r];
    table += line + "\n";
  }
  return table;
}

}  // namespace

HangVerdict judge_flight_records(const std::map<int, FlightRecord>& records,
                                 const std::map<int, std::string>& exited,
                                 const std::vector<int>& ranks, int64_t now_ms) {
  HangVerdict verdict;
  std::ostringstream why;
  for (const auto& [rank, record] : records) {
    const FlightEntry* wait = first_open(record);
    if (wait == nullptr) continue;
    (wait->state == EntryState::failed ? verdict.failed : verdict.waiting) = true;
    if (wait->state == EntryState::failed) verdict.failed_ranks.insert(rank);
    const std::string waiter = "  rank " + std::to_string(rank) +
                               (wait->state == EntryState::failed ? " failed in " : " waits in ") +
                               describe(*wait) + "; rank ";
    for (int peer : ranks) {
      if (peer == rank) continue;
      const auto peer_record = records.find(peer);
      if (auto gone = exited.find(peer); gone != exited.end()) {
        const FlightEntry* last = peer_record == records.end()
                                      ? nullptr
                                      : last_finished(peer_record->second, wait->group);
        why << waiter << peer << " " << gone->second
            << (last ? " after finishing " + describe(*last) : std::string())
            << " and will never enter it\n";
        verdict.proven = true;
        continue;
      }
      if (peer_record == records.end()) continue;
      // A pipeline's send or receive has no number in common with the peers' (each process
      // records only its own side): only a peer's end proves it will never be met.
      if (wait->op == "send" || wait->op == "recv") {
        const FlightEntry* last = last_finished(peer_record->second, "");
        why << waiter << peer << " has not sent it yet"
            << (last ? " (last seen in " + describe(*last) + ")" : std::string()) << "\n";
        continue;
      }
      const FlightEntry* same = entry_at(peer_record->second, wait->group, wait->seq);
      if (same != nullptr &&
          (same->call != wait->call || same->op != wait->op || same->shapes != wait->shapes)) {
        verdict.proven = verdict.mismatched = true;
        // A pair in two different calls is said once, from the lower rank's side.
        if (same->state != EntryState::done && peer < rank) continue;
        why << waiter << peer << " entered #" << wait->seq << " in another call: " << same->call
            << (same->shapes.empty() ? "" : " [" + same->shapes + "]")
            << ": the two will never meet\n";
      } else if (same != nullptr && same->state == EntryState::done) {
        why << waiter << peer << " has finished it\n";
        verdict.proven = true;
      } else if (same == nullptr && highest_seq(peer_record->second, wait->group) > wait->seq) {
        why << waiter << peer << " is past it\n";
        verdict.proven = true;
      } else if (same == nullptr) {
        const FlightEntry* last = last_finished(peer_record->second, wait->group);
        why << waiter << peer << " has not entered it yet"
            << (last ? " (last seen in " + describe(*last) + ")" : std::string()) << "\n";
      }
    }
  }
  verdict.table = process_table(records, exited, ranks, now_ms) + why.str();
  return verdict;
}

FlightWatch::FlightWatch(std::vector<int> ranks) : ranks_(std::move(ranks)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string base = (fs::temp_directory_path(ec) / "accel-flight-XXXXXX").string();
  if (ec) base = "/tmp/accel-flight-XXXXXX";
  std::vector<char> name(base.begin(), base.end());
  name.push_back('\0');
  if (::mkdtemp(name.data()) == nullptr) {
    say("could not create a folder for the flight records (", base,
        "); a hang will not be diagnosed");
    return;
  }
  dir_ = name.data();
  ::setenv(contract::kFlightRecordDir, dir_.c_str(), 1);
}

FlightWatch::~FlightWatch() {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::optional<HangVerdict> FlightWatch::poll(const std::map<int, std::string>& exited) {
  if (dir_.empty()) return std::nullopt;
  bool alerted = false;
  for (int rank : ranks_) {
    const std::string alert = flight::alert_path(dir_, rank);
    if (::access(alert.c_str(), F_OK) != 0) continue;
    ::unlink(alert.c_str());
    alerted = true;
  }
  if (!alerted) return std::nullopt;
  return judge_now(exited);
}

std::optional<HangVerdict> FlightWatch::judge_when_written(const std::map<int, std::string>& exited,
                                                           const std::vector<int>& running,
                                                           std::chrono::milliseconds patience) {
  if (dir_.empty()) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + patience;
  auto all_written = [&] {
    return std::all_of(running.begin(), running.end(), [&](int rank) {
      const std::string path = flight::record_path(dir_, rank);
      return ::access(path.c_str(), F_OK) == 0;
    });
  };
  while (!all_written() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return judge_now(exited);
}

std::optional<HangVerdict> FlightWatch::judge_now(const std::map<int, std::string>& exited) {
  if (dir_.empty()) return std::nullopt;
  std::map<int, FlightRecord> records;
  std::string problems;
  for (int rank : ranks_) {
    std::string error;
    const std::string path = flight::record_path(dir_, rank);
    if (::access(path.c_str(), F_OK) != 0) continue;
    if (auto record = read_flight_record(path, &error)) {
      records.emplace(rank, std::move(*record));
    } else {
      problems += "  " + error + "\n";
    }
  }
  if (records.empty()) return std::nullopt;
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  HangVerdict verdict = judge_flight_records(records, exited, ranks_, now);
  verdict.table += problems;
  return verdict;
}

}  // namespace launcher
}  // namespace accel
