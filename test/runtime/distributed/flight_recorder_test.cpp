// The flight recorder (distributed/flight_recorder.h) as NCCL drives it: a work whose future is
// complete while the device has not finished (ProcessGroupNCCL completes the future when the
// kernels are queued), an alert whose write fails, and the error Gloo raises when a peer's
// connection is lost. The recorder is the process's own, set up once: ctest runs this suite in a
// process of its own (test/CMakeLists.txt, one ctest per suite).

#include "distributed/flight_recorder.h"
#include "support/read_text.h"
#include "util/torch_compat.h"

#include "accel_common/flight_record.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;
using accel_test::read_text;
using namespace std::chrono_literals;

constexpr auto kWatchdog = 400ms;

fs::path record_dir() {
  return fs::path(::testing::TempDir()) / ("flight-recorder-" + std::to_string(::getpid()));
}

/// A collective as ProcessGroupNCCL hands it back: its future completed at once, wait() returning
/// (the stream waits, not the host), and isCompleted() true only when the device has finished
/// (`finished`, set by the test).
class DeviceWork final : public c10d::Work {
 public:
  explicit DeviceWork(std::shared_ptr<std::atomic<bool>> finished)
      : finished_(std::move(finished)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    future_->markCompleted(c10::IValue(std::vector<at::Tensor>{}));
  }
  bool isCompleted() override { return *finished_; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::shared_ptr<std::atomic<bool>> finished_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class DeviceBackend final : public c10d::Backend {
 public:
  explicit DeviceBackend(std::shared_ptr<std::atomic<bool>> finished)
      : Backend(0, 1), finished_(std::move(finished)) {}
  const std::string getBackendName() const override { return "device"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& /*tensors*/,
                                           const c10d::AllreduceOptions& /*opts*/) override {
    return c10::make_intrusive<DeviceWork>(finished_);
  }
  // As ProcessGroupNCCL's: inside a coalesced group a send or receive has no work of its own;
  // the group's work, from endCoalescing, completes them all.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override { coalescing_ = true; }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    coalescing_ = false;
    return c10::make_intrusive<DeviceWork>(finished_);
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& /*tensors*/, int /*dst*/,
                                      int /*tag*/) override {
    return coalescing_ ? nullptr : c10::make_intrusive<DeviceWork>(finished_);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& /*tensors*/, int /*src*/,
                                      int /*tag*/) override {
    return coalescing_ ? nullptr : c10::make_intrusive<DeviceWork>(finished_);
  }

 private:
  std::shared_ptr<std::atomic<bool>> finished_;
  bool coalescing_ = false;
};

/// The state of entry `seq` of `group` in `text` ("waiting", "done", "failed"); "absent" when the
/// record does not hold it.
std::string state_in(const std::string& text, const std::string& group, uint64_t seq) {
  std::string error;
  const auto record = accel::flight::parse_flight_record(text, "record", &error);
  EXPECT_TRUE(record) << error;
  if (!record) return "absent";
  for (const auto& entry : record->entries) {
    if (entry.group == group && entry.seq == seq) return accel::flight::to_string(entry.state);
  }
  return "absent";
}

/// Polls `done` every 20 ms for at most `limit`.
bool within(std::chrono::milliseconds limit, const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

class FlightRecorder : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(record_dir());
    fs::create_directories(record_dir());
    accel::distributed::FlightSettings settings;
    settings.watchdog = kWatchdog;
    settings.record_dir = record_dir().string();
    configured_ = accel::distributed::configure_flight_recorder(settings);
  }
  void SetUp() override {
    ASSERT_TRUE(configured_) << "the recorder was set up before this suite: run it on its own";
  }
  static bool configured_;
};
bool FlightRecorder::configured_ = false;

TEST_F(FlightRecorder, AnEntryStaysOpenUntilItsWorkSaysItCompletedThoughItsFutureHas) {
  auto finished = std::make_shared<std::atomic<bool>>(false);
  auto backend = accel::distributed::record_collectives(
      c10::make_intrusive<DeviceBackend>(finished), "device");
  std::vector<at::Tensor> tensors{torch::ones({2})};
  auto work = backend->allreduce(tensors);
  ASSERT_TRUE(work->getFuture()->completed());
  work->wait();  // returns at once, as NCCL's does: the collective is still on the device
  EXPECT_EQ(state_in(accel::distributed::flight_record_text(), "device", 1), "waiting");
  work.reset();  // the caller lets go; the recorder keeps asking the work

  // Past the watchdog, the alert names it waiting.
  const auto alert = accel::flight::alert_path(record_dir().string(), 0);
  ASSERT_TRUE(within(10 * kWatchdog, [&] { return fs::exists(alert); }));
  EXPECT_EQ(state_in(read_text(alert), "device", 1), "waiting") << read_text(alert);

  *finished = true;  // the device finishes: the watchdog thread retires the entry
  EXPECT_TRUE(within(10 * kWatchdog, [] {
    return state_in(accel::distributed::flight_record_text(), "device", 1) == "done";
  })) << accel::distributed::flight_record_text();
}

TEST_F(FlightRecorder, AnAlertWhoseWriteFailedIsWrittenOnTheNextTurn) {
  const auto alert = accel::flight::alert_path(record_dir().string(), 0);
  const auto record = accel::flight::record_path(record_dir().string(), 0);
  fs::remove_all(alert);
  fs::create_directories(alert);  // a folder in the way: the alert's write fails

  auto finished = std::make_shared<std::atomic<bool>>(false);
  auto backend =
      accel::distributed::record_collectives(c10::make_intrusive<DeviceBackend>(finished), "held");
  std::vector<at::Tensor> tensors{torch::ones({2})};
  auto work = backend->allreduce(tensors);
  // Recorded, then past the watchdog with a tick to spare: the alert's write has been tried.
  ASSERT_TRUE(
      within(10 * kWatchdog, [&] { return state_in(read_text(record), "held", 1) == "waiting"; }));
  std::this_thread::sleep_for(3 * kWatchdog);
  ASSERT_TRUE(fs::is_directory(alert));

  fs::remove_all(alert);  // the write can succeed now: the next turn writes it
  EXPECT_TRUE(within(10 * kWatchdog, [&] { return fs::is_regular_file(alert); }));
  EXPECT_EQ(state_in(read_text(alert), "held", 1), "waiting") << read_text(alert);
  *finished = true;
}

TEST_F(FlightRecorder, ACoalescedExchangeStaysOpenUntilItsGroupsWorkCompletes) {
  auto finished = std::make_shared<std::atomic<bool>>(false);
  auto backend =
      accel::distributed::record_collectives(c10::make_intrusive<DeviceBackend>(finished), "ring");
  std::vector<at::Tensor> out{torch::ones({2})}, in{torch::zeros({2})};
  backend->startCoalescing();
  backend->send(out, 0, 3);
  backend->recv(in, 0, 3);
  auto work = backend->endCoalescing();
  ASSERT_TRUE(work);
  work->wait();
  const auto text = accel::distributed::flight_record_text();
  EXPECT_EQ(state_in(text, "ring p2p", 1), "waiting") << text;
  EXPECT_EQ(state_in(text, "ring p2p", 2), "waiting") << text;
  *finished = true;
  EXPECT_TRUE(work->isCompleted());
  const auto done = accel::distributed::flight_record_text();
  EXPECT_EQ(state_in(done, "ring p2p", 1), "done") << done;
  EXPECT_EQ(state_in(done, "ring p2p", 2), "done") << done;
}

}  // namespace

// A class named as Gloo's is, in another namespace: its mangled name contains
// "gloo11IoException", which a match on the name's text took for Gloo's.
namespace decoy {
struct notgloo11IoException : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace decoy

namespace {

TEST(LostPeer, GlooLosingAPeerIsKnownByTheErrorsTypeNotItsName) {
  ASSERT_NE(accel::util::gloo_io_exception_type(), nullptr);
  // Two processes' Gloo backends in one: rank 1's goes away while rank 0 waits for its part.
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto device = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  c10::intrusive_ptr<c10d::Backend> ranks[2];
  std::thread other([&] { ranks[1] = accel::util::make_gloo_backend(store, 1, 2, device, 10s); });
  ranks[0] = accel::util::make_gloo_backend(store, 0, 2, device, 10s);
  other.join();
  std::vector<at::Tensor> tensors{torch::ones({4})};
  auto work = ranks[0]->allreduce(tensors);
  std::this_thread::sleep_for(100ms);
  ranks[1].reset();  // its connections close

  bool lost_peer = false;
  std::string what;
  try {
    work->wait();
  } catch (const std::exception& e) {
    what = e.what();
    lost_peer = accel::distributed::is_lost_peer(e);
  }
  EXPECT_FALSE(what.empty()) << "the allreduce finished without its peer";
  EXPECT_TRUE(lost_peer) << what;

  EXPECT_FALSE(accel::distributed::is_lost_peer(decoy::notgloo11IoException("not Gloo's")));
  EXPECT_FALSE(accel::distributed::is_lost_peer(std::runtime_error("Connection reset by peer")));
}

}  // namespace
