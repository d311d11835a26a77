#include "flight_recorder.h"

#include "collectives.h"

#include "util/collective_label.h"
#include "util/durable_file.h"
#include "util/torch_compat.h"

#include "accel_common/contract.h"
#include "accel_common/flight_record.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <typeinfo>
#include <vector>

namespace accel {
namespace distributed {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Whether `work` is complete, as the work itself says (on NCCL, its CUDA end event): nullopt
/// while it is not, else its error ("" when none).
std::optional<std::string> completion_of(c10d::Work& work) {
  try {
    if (!work.isCompleted()) return std::nullopt;
    if (auto error = work.exception()) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        return std::string(e.what());
      } catch (...) {
        return std::string("failed");
      }
    }
    return std::string();
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
}

/// Entries of the record, each (group, sequence number): those one work completes (one, or a
/// coalesced group's).
using Entries = std::vector<std::pair<size_t, uint64_t>>;

struct GroupRecord {
  std::string name;
  uint64_t next_seq = 0;
  std::deque<flight::FlightEntry> entries;  // each in the record's own form, state kept current
  uint64_t reported_stuck = 0;              // the last sequence number reported as stuck
};

class Recorder {
 public:
  static Recorder& instance() {
    // Never destroyed: the watchdog thread and Gloo's threads may still record while the
    // process exits.
    static auto* recorder = new Recorder();
    return *recorder;
  }

  bool configure(const FlightSettings& settings) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (configured_) return false;
    configured_ = true;
    settings_ = settings;
    if (!settings_.record_dir.empty())
      writer_ = std::make_unique<FlightRecordWriter>(settings_.record_dir, settings_.rank);
    if (settings_.capacity > 0) std::thread([this] { watch(); }).detach();
    // Gloo throws a peer's reset connection on its own threads, where the exception ends the
    // process before any collective's callback can record it, often between collectives: it is
    // recorded as a failure on the way out, so the launcher can tell a process that died of a
    // peer's end from the one that failed first.
    if (writer_) previous_terminate_ = std::set_terminate(&Recorder::on_terminate);
    return true;
  }
  bool enabled() {
    std::lock_guard<std::mutex> lock(mutex_);
    return configured_ && settings_.capacity > 0;
  }

  size_t add_group(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    groups_.push_back(GroupRecord{name, 0, {}, 0});
    return groups_.size() - 1;
  }

  uint64_t begin(size_t group, const char* op, std::string call, std::string shapes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& record = groups_[group];
    flight::FlightEntry entry;  // its group is named when a snapshot is taken
    entry.seq = ++record.next_seq;
    entry.op = op;
    entry.call = std::move(call);
    entry.shapes = std::move(shapes);
    entry.start_ms = now_ms();
    record.entries.push_back(std::move(entry));
    // Keep the last `capacity`, and every collective still under way.
    while (record.entries.size() > settings_.capacity && record.entries.front().end_ms >= 0)
      record.entries.pop_front();
    ++version_;
    return record.next_seq;
  }

  /// Keeps `work` until it says it is complete (retire_completed): `entries` stay open until
  /// then.
  void track(const Entries& entries, const c10::intrusive_ptr<c10d::Work>& work) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [group, seq] : entries) open_works_.push_back(OpenWork{group, seq, work});
  }

  void end_all(const Entries& entries, const std::string& error) {
    for (const auto& [group, seq] : entries) end(group, seq, error);
  }

  /// Retires every tracked entry whose work says it is complete. The works are asked without the
  /// recorder's lock: a backend's thread may be finishing one and recording another.
  void retire_completed() {
    std::vector<OpenWork> open;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open = open_works_;
    }
    for (const auto& work : open) {
      if (auto error = completion_of(*work.work)) end(work.group, work.seq, std::move(*error));
    }
  }

  void end(size_t group, uint64_t seq, std::string error) {
    c10::intrusive_ptr<c10d::Work> released;  // dropped after the lock: never under it
    std::unique_lock<std::mutex> lock(mutex_);
    for (auto it = open_works_.begin(); it != open_works_.end(); ++it) {
      if (it->group != group || it->seq != seq) continue;
      released = std::move(it->work);
      open_works_.erase(it);
      break;
    }
    ++version_;
    auto& entries = groups_[group].entries;
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      if (it->seq != seq) continue;
      if (it->end_ms >= 0) break;  // retired already (its work, its error or its wait)
      it->end_ms = now_ms();
      it->error = std::move(error);
      it->state = it->error.empty() ? flight::EntryState::done : flight::EntryState::failed;
      if (it->error.empty()) break;
      if (!writer_) {
        urgent_ = true;  // the watchdog thread prints the record
        wake_.notify_one();
        break;
      }
      // Written here, not left to the watchdog thread: the process may end with the
      // collective's exception before that thread runs.
      const auto record = snapshot_locked();
      lock.unlock();
      if (!writer_->write(record, /*alert=*/true)) {
        lock.lock();
        alert_owed_ = true;  // the watchdog thread writes it on its next turn
      }
      break;
    }
  }

  std::string text() {
    std::lock_guard<std::mutex> lock(mutex_);
    return flight::format_flight_record(snapshot_locked());
  }

  /// std::terminate's handler: a connection to a peer lost on Gloo's threads is recorded as a
  /// failed collective (any other uncaught exception is the process's own failure: left as is).
  [[noreturn]] static void on_terminate() {
    if (auto error = std::current_exception()) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        if (is_lost_peer(e)) instance().record_lost_peer(e.what());
      } catch (...) {
      }
    }
    auto previous = instance().previous_terminate_;
    if (previous != nullptr) previous();
    std::abort();
  }

 private:
  struct OpenWork {
    size_t group;
    uint64_t seq;
    c10::intrusive_ptr<c10d::Work> work;
  };

  // Retires the entries whose works completed, then writes the record when it changed (at most
  // once a tick), and at once, with an alert, when a collective has waited past the watchdog
  // time. An alert whose write failed is written on the next turn. Without the launcher it
  // prints the record instead, on a wait past the watchdog or a failed collective (with the
  // launcher, end() writes a failure's record itself).
  void watch() {
    const auto tick = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(1000), settings_.watchdog / 4 + std::chrono::milliseconds(1));
    uint64_t written_version = 0;
    std::vector<std::string> unalerted;  // "GROUP SEQ" past the watchdog, no alert written yet
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait_for(lock, tick, [this] { return urgent_; });
      }
      retire_completed();
      std::unique_lock<std::mutex> lock(mutex_);
      const bool failed = urgent_;
      urgent_ = false;
      const auto stuck = newly_stuck_locked();
      unalerted.insert(unalerted.end(), stuck.begin(), stuck.end());
      const bool alert = !unalerted.empty() || alert_owed_;
      if (version_ == written_version && !alert && !failed) continue;
      const auto record = snapshot_locked();
      lock.unlock();
      if (!writer_) {
        if (!stuck.empty() || failed) print_record(record, failed);
        written_version = record.version;
        unalerted.clear();
        continue;
      }
      if (!writer_->write(record, alert)) continue;  // tried again on the next turn
      written_version = record.version;
      if (!alert) continue;
      if (!unalerted.empty()) announce_stuck(unalerted.front());
      unalerted.clear();
      lock.lock();
      alert_owed_ = false;
    }
  }

  /// "GROUP SEQ" of each group's oldest collective under way, when it has waited past the
  /// watchdog time and was not reported before.
  std::vector<std::string> newly_stuck_locked() {
    std::vector<std::string> stuck;
    const int64_t now = now_ms();
    for (auto& record : groups_) {
      for (const auto& entry : record.entries) {
        if (entry.end_ms >= 0) continue;
        if (now - entry.start_ms > settings_.watchdog.count() &&
            record.reported_stuck < entry.seq) {
          record.reported_stuck = entry.seq;
          stuck.push_back(record.name + " " + std::to_string(entry.seq));
        }
        break;  // the oldest under way decides
      }
    }
    return stuck;
  }

  void print_record(const flight::FlightRecord& record, bool failed) const {
    const std::string report =
        "accel: rank " + std::to_string(settings_.rank) +
        (failed ? ": a collective failed"
                : ": a collective has waited past " + std::string(contract::kHangWatchdog)) +
        "; the last collectives of this process:\n" + flight::format_flight_record(record);
    [[maybe_unused]] const auto written = ::write(STDERR_FILENO, report.data(), report.size());
  }

  /// The process's first wait past the watchdog, once, in one write (so that the other
  /// processes' lines do not cut into it).
  void announce_stuck(const std::string& stuck) {
    if (announced_) return;
    announced_ = true;
    std::ostringstream line;
    line << "accel: rank " << settings_.rank << " has waited more than "
         << settings_.watchdog.count() / 1000.0 << " s in a collective (" << stuck
         << "); its record is in " << writer_->record_path() << "\n";
    const std::string text = line.str();
    [[maybe_unused]] const auto written = ::write(STDERR_FILENO, text.data(), text.size());
  }

  /// The connection to a peer was lost (`error`): the collectives under way failed with it, or,
  /// between collectives, an entry says so. Then the record is written. Skipped when the
  /// recorder's lock is held (the exception came from inside it): never a deadlock on exit.
  void record_lost_peer(const std::string& error) {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock() || groups_.empty()) return;
    bool any = false;
    const int64_t now = now_ms();
    for (auto& record : groups_) {
      for (auto& entry : record.entries) {
        if (entry.end_ms >= 0) continue;
        entry.end_ms = now;
        entry.error = error;
        entry.state = flight::EntryState::failed;
        any = true;
      }
    }
    if (!any) {
      auto& record = groups_.front();
      flight::FlightEntry lost;
      lost.seq = ++record.next_seq;
      lost.op = "connection";
      lost.call = "between collectives";
      lost.start_ms = lost.end_ms = now;
      lost.error = error;
      lost.state = flight::EntryState::failed;
      record.entries.push_back(std::move(lost));
    }
    ++version_;
    const auto snapshot = snapshot_locked();
    lock.unlock();
    // On the way out: a watchdog write under way gets a second to finish, never a deadlock.
    writer_->write(snapshot, /*alert=*/false, std::chrono::seconds(1));
  }

  /// The record as it stands (the caller holds the lock), numbered by version_.
  flight::FlightRecord snapshot_locked() const {
    flight::FlightRecord record;
    record.rank = static_cast<int>(settings_.rank);
    record.pid = ::getpid();
    record.version = version_;
    record.written_ms = now_ms();
    record.watchdog_ms = settings_.watchdog.count();
    for (const auto& group : groups_) {
      for (const auto& entry : group.entries) {
        record.entries.push_back(entry);
        record.entries.back().group = group.name;
      }
    }
    return record;
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool configured_ = false, urgent_ = false;
  bool alert_owed_ = false;  // a failure's alert that end() could not write
  bool announced_ = false;   // the watchdog thread's own
  FlightSettings settings_;
  std::unique_ptr<FlightRecordWriter> writer_;  // null without the launcher's record folder
  std::vector<GroupRecord> groups_;
  std::vector<OpenWork> open_works_;  // the works of open entries, until they complete
  uint64_t version_ = 0;
  std::terminate_handler previous_terminate_ = nullptr;
};

using c10d::Work;

/// The work a recorded collective or receive hands its caller. Its entry is retired when the
/// work says it is complete (`isCompleted()`; on NCCL, the CUDA end event), not when its future
/// is: ProcessGroupNCCL completes the future when the kernels are queued, so a collective stuck
/// on the device would read as done. Asked on wait() and isCompleted(), and otherwise by the
/// watchdog thread, which keeps the inner work until then (as c10d's watchdog keeps its works).
/// A receive completes on Gloo only when waited on: a stage waiting for its peer shows here.
class RecordedWork final : public Work {
 public:
  /// `inner`, which completes `entries`; the recorder asks it too until it does.
  RecordedWork(c10::intrusive_ptr<Work> inner, Entries entries)
      : inner_(std::move(inner)), entries_(std::move(entries)) {
    Recorder::instance().track(entries_, inner_);
  }
  bool wait(std::chrono::milliseconds timeout) override {
    bool done = false;
    try {
      done = inner_->wait(timeout);
    } catch (const std::exception& e) {
      retire(e.what());
      throw;
    }
    isCompleted();
    return done;
  }
  bool isCompleted() override {
    auto completion = completion_of(*inner_);
    if (completion) retire(std::move(*completion));
    return completion.has_value();
  }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_->exception(); }
  int sourceRank() const override { return inner_->sourceRank(); }
  std::vector<at::Tensor> result() override { return inner_->result(); }
  void synchronize() override { inner_->synchronize(); }
  void abort() override { inner_->abort(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return inner_->getFuture(); }
  uint64_t getSequencenumber() const override { return inner_->getSequencenumber(); }

 private:
  void retire(const std::string& error) {
    if (!retired_.exchange(true)) Recorder::instance().end_all(entries_, error);
  }

  c10::intrusive_ptr<Work> inner_;
  Entries entries_;
  std::atomic<bool> retired_{false};
};

// A backend that records every collective it passes on (c10d's ProcessGroupWrapper's shape).
class RecordingBackend final : public c10d::Backend {
 public:
  RecordingBackend(c10::intrusive_ptr<c10d::Backend> inner, size_t group, size_t point_to_point,
                   c10::intrusive_ptr<c10d::Backend> checker)
      : Backend(inner->getRank(), inner->getSize()),
        inner_(std::move(inner)),
        group_(group),
        point_to_point_(point_to_point),
        checker_(std::move(checker)) {}

  const std::string getBackendName() const override { return inner_->getBackendName(); }
  bool supportsSplitting() const override { return inner_->supportsSplitting(); }
  bool supportsCoalescing() const override { return inner_->supportsCoalescing(); }
  c10::intrusive_ptr<Options> getBackendOptions() override { return inner_->getBackendOptions(); }
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  void startCoalescing() override {
    inner_->startCoalescing();
    coalescing_ = true;
  }
  // A coalesced group's operations (NCCL's batch_isend_irecv) complete with the group's work:
  // their entries stay open until it says so.
  c10::intrusive_ptr<Work> endCoalescing() override {
    Entries entries;
    entries.swap(coalesced_);
    coalescing_ = false;
    c10::intrusive_ptr<Work> work;
    try {
      work = inner_->endCoalescing();
    } catch (const std::exception& e) {
      Recorder::instance().end_all(entries, e.what());
      throw;
    }
    if (!work || entries.empty()) {
      Recorder::instance().end_all(entries, "");
      return work;
    }
    return c10::make_intrusive<RecordedWork>(std::move(work), std::move(entries));
  }
  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }
  void eagerConnectSingleDevice(at::Device device) override {
    inner_->eagerConnectSingleDevice(device);
  }
  c10d::ErrorType getError() override { return inner_->getError(); }
  void abort() override { inner_->abort(); }
  void shutdown() override { inner_->shutdown(); }

  c10::intrusive_ptr<Work> broadcast(std::vector<at::Tensor>& tensors,
                                     const c10d::BroadcastOptions& opts) override {
    return run("broadcast", tensors, [&] { return inner_->broadcast(tensors, opts); });
  }
  c10::intrusive_ptr<Work> allreduce(std::vector<at::Tensor>& tensors,
                                     const c10d::AllreduceOptions& opts) override {
    return run("allreduce", tensors, [&] { return inner_->allreduce(tensors, opts); });
  }
  c10::intrusive_ptr<Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    return run("allreduce", tensors, [&] { return inner_->allreduce_coalesced(tensors, opts); });
  }
  c10::intrusive_ptr<Work> reduce(std::vector<at::Tensor>& tensors,
                                  const c10d::ReduceOptions& opts) override {
    return run("reduce", tensors, [&] { return inner_->reduce(tensors, opts); });
  }
  c10::intrusive_ptr<Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                     std::vector<at::Tensor>& inputs,
                                     const c10d::AllgatherOptions& opts) override {
    return run("allgather", inputs, [&] { return inner_->allgather(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                           const c10d::AllgatherOptions& opts) override {
    return run("allgather", {input}, [&] { return inner_->_allgather_base(output, input, opts); });
  }
  c10::intrusive_ptr<Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs,
                                               const c10d::AllgatherOptions& opts) override {
    return run("allgather", inputs,
               [&] { return inner_->allgather_coalesced(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    return run("allgather", inputs,
               [&] { return inner_->allgather_into_tensor_coalesced(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                  std::vector<at::Tensor>& inputs,
                                  const c10d::GatherOptions& opts) override {
    return run("gather", inputs, [&] { return inner_->gather(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<Work> scatter(std::vector<at::Tensor>& outputs,
                                   std::vector<std::vector<at::Tensor>>& inputs,
                                   const c10d::ScatterOptions& opts) override {
    return run("scatter", outputs, [&] { return inner_->scatter(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                          std::vector<std::vector<at::Tensor>>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    return run("reduce_scatter", outputs,
               [&] { return inner_->reduce_scatter(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                const c10d::ReduceScatterOptions& opts) override {
    return run("reduce_scatter", {input},
               [&] { return inner_->_reduce_scatter_base(output, input, opts); });
  }
  c10::intrusive_ptr<Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    return run("reduce_scatter", inputs,
               [&] { return inner_->reduce_scatter_tensor_coalesced(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                         std::vector<int64_t>& output_splits,
                                         std::vector<int64_t>& input_splits,
                                         const c10d::AllToAllOptions& opts) override {
    return run("alltoall", {input}, [&] {
      return inner_->alltoall_base(output, input, output_splits, input_splits, opts);
    });
  }
  c10::intrusive_ptr<Work> alltoall(std::vector<at::Tensor>& outputs,
                                    std::vector<at::Tensor>& inputs,
                                    const c10d::AllToAllOptions& opts) override {
    return run("alltoall", inputs, [&] { return inner_->alltoall(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<Work> barrier(const c10d::BarrierOptions& opts) override {
    return run("barrier", {}, [&] { return inner_->barrier(opts); });
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    inner_->monitoredBarrier(opts, wait_all_ranks);
  }
  // Point-to-point operations (a pipeline's activations) are recorded apart from the group's
  // collectives: their numbers do not match across processes, and no checker compares them.
  c10::intrusive_ptr<Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    return record(point_to_point_, "send", tensors, Kind::send,
                  [&] { return inner_->send(tensors, dst, tag); });
  }
  c10::intrusive_ptr<Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    return record(point_to_point_, "recv", tensors, Kind::receive,
                  [&] { return inner_->recv(tensors, src, tag); });
  }
  c10::intrusive_ptr<Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    return inner_->recvAnysource(tensors, tag);
  }

 private:
  /// What is recorded: a collective (compared across processes under ACCEL_DEBUG), or a send or
  /// a receive. Without a future (Gloo's sends and receives, which complete only when waited on),
  /// a send counts as done when issued (a pipeline waits on its sends late, by design) and a
  /// receive stays open until its work says it completed.
  enum class Kind { collective, send, receive };

  template <typename Issue>
  c10::intrusive_ptr<Work> run(const char* op, const std::vector<at::Tensor>& tensors,
                               Issue&& issue) {
    return record(group_, op, tensors, Kind::collective, std::forward<Issue>(issue));
  }

  template <typename Issue>
  c10::intrusive_ptr<Work> record(size_t group_index, const char* op,
                                  const std::vector<at::Tensor>& tensors, Kind kind,
                                  Issue&& issue) {
    auto& recorder = Recorder::instance();
    std::string call = util::describe_collective_call(op);
    std::string shapes = describe_tensors(tensors);
    const bool compares = kind == Kind::collective && checker_;
    const std::string fingerprint = !compares        ? std::string()
                                    : shapes.empty() ? call
                                                     : call + " [" + shapes + "]";
    const uint64_t seq = recorder.begin(group_index, op, std::move(call), std::move(shapes));
    c10::intrusive_ptr<Work> work;
    try {
      if (compares) compare_with_others(seq, fingerprint);
      work = issue();
    } catch (const std::exception& e) {
      recorder.end(group_index, seq, e.what());
      throw;
    }
    if (!work) {
      // Inside a coalesced group (NCCL): the group's work completes it (endCoalescing).
      if (coalescing_) {
        coalesced_.emplace_back(group_index, seq);
      } else {
        recorder.end(group_index, seq, "");
      }
      return work;
    }
    c10::intrusive_ptr<c10::ivalue::Future> future;
    try {
      future = work->getFuture();
    } catch (const std::exception&) {
      // No future (see Kind).
      if (kind != Kind::receive) {
        recorder.end(group_index, seq, "");
        return work;
      }
    }
    if (future) {
      // Errors from the future (it may fail before the work is asked); completion from the work.
      future->addCallback([group_index, seq](c10::ivalue::Future& done) {
        if (done.hasError())
          Recorder::instance().end(group_index, seq, done.tryRetrieveErrorMessage());
      });
    }
    return c10::make_intrusive<RecordedWork>(std::move(work), Entries{{group_index, seq}});
  }

  // ACCEL_DEBUG: every process describes the collective it is about to enter, through a Gloo
  // backend of its own (as c10d's ProcessGroupWrapper checks), and all compare: two processes in
  // different calls, or with different shapes, fail here with both named instead of hanging.
  void compare_with_others(uint64_t seq, const std::string& fingerprint) {
    constexpr int64_t kBytes = 512;
    auto mine = torch::zeros({kBytes}, torch::kUInt8);
    std::memcpy(mine.data_ptr(), fingerprint.data(),
                std::min<size_t>(fingerprint.size(), kBytes - 1));
    std::vector<at::Tensor> inputs{mine};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < getSize(); ++r) outputs[0].push_back(torch::empty_like(mine));
    checker_->allgather(outputs, inputs)->wait();
    std::vector<std::string> all;
    for (const auto& t : outputs[0]) all.emplace_back(static_cast<const char*>(t.data_ptr()));
    distributed::check_same_collective(all, "#" + std::to_string(seq));
  }

  c10::intrusive_ptr<c10d::Backend> inner_;
  size_t group_;
  size_t point_to_point_;  // the record of this group's sends and receives
  c10::intrusive_ptr<c10d::Backend> checker_;
  bool coalescing_ = false;  // between startCoalescing and endCoalescing
  Entries coalesced_;        // the entries the group's work will complete
};

}  // namespace

FlightRecordWriter::FlightRecordWriter(const std::string& dir, int64_t rank)
    : record_path_(flight::record_path(dir, rank)), alert_path_(flight::alert_path(dir, rank)) {}

bool FlightRecordWriter::write(const flight::FlightRecord& record, bool alert,
                               std::optional<std::chrono::milliseconds> patience) {
  std::unique_lock<std::timed_mutex> lock(mutex_, std::defer_lock);
  if (patience) {
    if (!lock.try_lock_for(*patience)) return false;
  } else {
    lock.lock();
  }
  if (written_any_ && record.version < written_version_) return false;
  const std::string text = flight::format_flight_record(record);
  try {
    util::write_file_durably(record_path_, text);
    if (alert) util::write_file_durably(alert_path_, text);
  } catch (const std::exception&) {
    return false;  // the previous record stays whole; the next write tries again
  }
  written_any_ = true;
  written_version_ = record.version;
  return true;
}

FlightSettings flight_settings_from(const EnvLookup& env, int64_t rank) {
  FlightSettings settings;
  settings.rank = rank;
  if (auto text = env_string(env, contract::kFlightRecorder)) {
    const auto count = contract::parse_integer(*text);
    TORCH_CHECK(count && *count >= 0, "accel: ", contract::kFlightRecorder,
                " must be a whole number of collectives to keep (0 turns the recorder off), not '",
                *text, "'");
    settings.capacity = static_cast<size_t>(*count);
  }
  if (auto text = env_string(env, contract::kHangWatchdog)) {
    const auto seconds = contract::parse_seconds(*text);
    TORCH_CHECK(seconds, "accel: ", contract::kHangWatchdog,
                " must be a number of seconds above 0 (how long a collective may wait before "
                "every process's record is written), not '",
                *text, "'");
    settings.watchdog = *seconds;
  }
  if (auto dir = env_string(env, contract::kFlightRecordDir)) settings.record_dir = *dir;
  return settings;
}

bool configure_flight_recorder(const FlightSettings& settings) {
  return Recorder::instance().configure(settings);
}

c10::intrusive_ptr<c10d::Backend> record_collectives(c10::intrusive_ptr<c10d::Backend> inner,
                                                     const std::string& name,
                                                     c10::intrusive_ptr<c10d::Backend> checker) {
  auto& recorder = Recorder::instance();
  if (!recorder.enabled() && !checker) return inner;
  const size_t group = recorder.add_group(name);
  return c10::make_intrusive<RecordingBackend>(
      std::move(inner), group, recorder.add_group(name + " p2p"), std::move(checker));
}

std::string flight_record_text() { return Recorder::instance().text(); }

bool is_lost_peer(const std::exception& error) {
  const std::type_info* lost_peer = util::gloo_io_exception_type();
  return lost_peer != nullptr && typeid(error) == *lost_peer;
}

}  // namespace distributed
}  // namespace accel
