// Experiment tracking on one process: the built-in trackers' files, a program's own tracker, and
// what happens when values or trackers are bad (the run goes on, the problem is named).

#include <accel/accel.h>

#include "support/env_guard.h"
#include "support/read_text.h"
#include "tracking/event_file.h"
#ifdef ACCEL_WITH_MLFLOW
#include "tracking/http_client.h"
#endif

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using accel_test::read_text;

class Tracking : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("accel_tracking_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  accel::AcceleratorOptions options(std::vector<std::string> log_with) const {
    return accel::AcceleratorOptions()
        .cpu(true)
        .log_with(std::move(log_with))
        .project_config(accel::ProjectConfiguration().project_dir(dir_.string()));
  }
  fs::path dir_;
};

/// A program's own tracker: keeps what it is given; throws from log when told to.
class Recorder : public accel::GeneralTracker {
 public:
  explicit Recorder(bool fail_in_log = false) : fail_in_log_(fail_in_log) {}
  std::string name() const override { return fail_in_log_ ? "failing" : "recorder"; }
  void start(const std::string& run_name, const std::string& logging_dir,
             const accel::TrackerValues& options) override {
    run = run_name;
    folder = logging_dir;
    start_options = options;
  }
  void store_init_configuration(const accel::TrackerValues& config) override {
    configuration = config;
  }
  void log(const accel::TrackerValues& values, std::optional<int64_t> step) override {
    if (fail_in_log_) throw std::runtime_error("the service is down");
    for (const auto& [key, value] : values) logged.push_back(key + "=" + value.text());
    steps.push_back(step);
  }
  void finish() override { finished = true; }
  std::string run, folder;
  accel::TrackerValues start_options, configuration;
  std::vector<std::string> logged;
  std::vector<std::optional<int64_t>> steps;
  bool finished = false;

 private:
  bool fail_in_log_;
};

TEST(EventFile, Crc32cIsCastagnolisAndMaskedAsTfRecord) {
  // The check value of CRC-32C, and TFRecord's mask of it.
  const std::string digits = "123456789";
  EXPECT_EQ(accel::tracking::crc32c(digits.data(), digits.size()), 0xE3069283u);
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(accel::tracking::masked_crc32c(digits.data(), digits.size()),
            ((crc >> 15) | (crc << 17)) + 0xA282EAD8u);
  EXPECT_EQ(accel::tracking::crc32c("", 0), 0u);
}

TEST_F(Tracking, ValuesReadAsTheirTypes) {
  EXPECT_EQ(accel::TrackerValue(3).text(), "3");
  EXPECT_EQ(accel::TrackerValue(0.1).text(), "0.1");
  EXPECT_EQ(accel::TrackerValue(true).text(), "true");
  EXPECT_EQ(accel::TrackerValue("adam").text(), "adam");
  EXPECT_EQ(accel::TrackerValue(torch::tensor(2.5f)).number(), 2.5);
  EXPECT_FALSE(accel::TrackerValue("x").is_number());
  EXPECT_THROW(accel::TrackerValue(torch::ones({2})), c10::Error);
}

TEST_F(Tracking, BuiltInTrackersWriteUnderLoggingDirAndOwnTrackersGetEverything) {
  auto recorder = std::make_shared<Recorder>();
  accel::Accelerator accelerator(options({"csv", "jsonl", "tensorboard"}).trackers({recorder}));
  accelerator.init_trackers("run", {{"lr", 0.01}, {"layers", 4}},
                            {{"recorder", {{"entity", "team"}}}});
  EXPECT_EQ(recorder->run, "run");
  EXPECT_EQ(recorder->folder, dir_.string());
  ASSERT_EQ(recorder->start_options.size(), 1u);
  EXPECT_EQ(recorder->start_options[0].second.text(), "team");
  ASSERT_EQ(recorder->configuration.size(), 2u);
  accelerator.log({{"loss", torch::tensor(0.5)}, {"tag", "a,b"}}, 3);
  accelerator.log({{"loss", 0.25}});
  EXPECT_EQ(recorder->logged, (std::vector<std::string>{"loss=0.5", "tag=a,b", "loss=0.25"}));
  EXPECT_EQ(recorder->steps, (std::vector<std::optional<int64_t>>{3, std::nullopt}));
  EXPECT_EQ(&accelerator.get_tracker("recorder"), recorder.get());
  accelerator.end_training();
  EXPECT_TRUE(recorder->finished);
  const auto run = dir_ / "run";
  const auto csv = read_text(run / "metrics.csv");
  EXPECT_EQ(csv.rfind("step,name,value,wall_time\n3,loss,0.5,", 0), 0u) << csv;
  EXPECT_NE(csv.find("\n3,tag,\"a,b\","), std::string::npos) << csv;  // quoted
  EXPECT_NE(csv.find("\n,loss,0.25,"), std::string::npos) << csv;     // no step
  EXPECT_NE(read_text(run / "metrics.jsonl").find("\"values\":{\"loss\":0.25}"), std::string::npos);
  EXPECT_NE(read_text(run / "config.json").find("\"layers\": 4"), std::string::npos);
  int event_files = 0;
  for (const auto& entry : fs::directory_iterator(run)) {
    event_files += entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_EQ(event_files, 1);
}

TEST_F(Tracking, BadValuesAndFailingTrackersAreNamedAndTrainingGoesOn) {
  auto failing = std::make_shared<Recorder>(/*fail_in_log=*/true);
  auto recorder = std::make_shared<Recorder>();
  accel::Accelerator accelerator(options({"csv"}).trackers({failing, recorder}));
  accelerator.init_trackers("run");
  testing::internal::CaptureStderr();
  accelerator.log({{"loss", std::numeric_limits<double>::infinity()}, {"lr", 0.1}}, 7);
  accelerator.log({{"lr", 0.2}}, 8);
  const auto messages = testing::internal::GetCapturedStderr();
  EXPECT_NE(messages.find("'loss' at step 7 is inf, which trackers do not record; left out"),
            std::string::npos)
      << messages;
  EXPECT_NE(messages.find("tracker 'failing' failed in log: the service is down; it is stopped"),
            std::string::npos)
      << messages;
  // The failing tracker is gone after its first failure; the others got every finite value.
  EXPECT_EQ(recorder->logged, (std::vector<std::string>{"lr=0.1", "lr=0.2"}));
  EXPECT_THROW(accelerator.get_tracker("failing"), c10::Error);
  try {
    accelerator.get_tracker("wandb");
    ADD_FAILURE() << "an unknown tracker was returned";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("no started tracker is called 'wandb' (started: "
                        "csv, recorder)"),
              std::string::npos)
        << error.what();
  }
  // A second init_trackers is a mistake in the program, named.
  try {
    accelerator.init_trackers("again");
    ADD_FAILURE() << "init_trackers ran twice";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("init_trackers was called already"),
              std::string::npos);
  }
  EXPECT_NE(read_text(dir_ / "run" / "metrics.csv").find("8,lr,0.2,"), std::string::npos);
}

TEST_F(Tracking, AnUnwritableFolderLeavesThatTrackerOutAndTheRunGoesOn) {
  // A file where the logging folder should be: no tracker can create its run folder.
  fs::create_directories(dir_);
  std::ofstream(dir_ / "blocked") << "not a folder";
  auto recorder = std::make_shared<Recorder>();
  accel::Accelerator accelerator(
      options({"tensorboard", "csv"})
          .trackers({recorder})
          .project_config(accel::ProjectConfiguration().logging_dir((dir_ / "blocked").string())));
  testing::internal::CaptureStderr();
  accelerator.init_trackers("run");
  accelerator.log({{"loss", 1.0}}, 0);
  const auto messages = testing::internal::GetCapturedStderr();
  EXPECT_NE(messages.find("tracker 'tensorboard' failed in init_trackers: accel: cannot create "
                          "the logging folder " +
                          (dir_ / "blocked" / "run").string()),
            std::string::npos)
      << messages;
  EXPECT_NE(messages.find("tracker 'csv' failed in init_trackers"), std::string::npos);
  EXPECT_EQ(recorder->logged, (std::vector<std::string>{"loss=1"}));
}

TEST_F(Tracking, InitKwargsGiveAFileTrackerItsOwnFolderAndNothingElse) {
  accel::Accelerator accelerator(options({"csv", "jsonl"}));
  testing::internal::CaptureStderr();
  accelerator.init_trackers(
      "run", {},
      {{"csv", {{"logging_dir", (dir_ / "elsewhere").string()}}}, {"jsonl", {{"colour", "red"}}}});
  accelerator.log({{"loss", 1.0}}, 0);
  accelerator.end_training();
  const auto messages = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(fs::exists(dir_ / "elsewhere" / "run" / "metrics.csv"));
  EXPECT_FALSE(fs::exists(dir_ / "run" / "metrics.csv"));
  EXPECT_NE(messages.find("tracker 'jsonl' failed in init_trackers: init_kwargs for 'jsonl' has "
                          "'colour'; the file trackers take only logging_dir"),
            std::string::npos)
      << messages;
  EXPECT_FALSE(fs::exists(dir_ / "run" / "metrics.jsonl"));
}

TEST_F(Tracking, LogWithNamesAreCheckedAtConstruction) {
  try {
    accel::Accelerator accelerator(options({"tensorbord"}));
    ADD_FAILURE() << "an unknown tracker name was accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(
        std::string(error.what())
            .find("accel: invalid log_with: 'tensorbord' (expected all, tensorboard, csv, jsonl"),
        std::string::npos)
        << error.what();
  }
  accel_test::EnvGuard no_server("MLFLOW_TRACKING_URI", nullptr);
  EXPECT_EQ(accel::resolve_options(options({"all"})).log_with,
            (std::vector<std::string>{"tensorboard", "csv", "jsonl"}));
}

#ifdef ACCEL_WITH_MLFLOW
// The MLflow tracker against a real server is tested by tracking.mlflow_round_trip; here, what
// needs no server.

TEST_F(Tracking, AllStartsMlflowWhereAServerIsNamed) {
  accel_test::EnvGuard server("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000");
  EXPECT_EQ(accel::resolve_options(options({"all"})).log_with,
            (std::vector<std::string>{"tensorboard", "csv", "jsonl", "mlflow"}));
}

TEST_F(Tracking, MlflowSendsCredentialsAsItsClientsDo) {
  using accel::tracking::HttpClient;
  accel::tracking::HttpSettings settings;
  EXPECT_TRUE(HttpClient::auth_headers(settings).empty());
  settings.bearer_token = "tok-123";
  EXPECT_EQ(HttpClient::auth_headers(settings),
            std::vector<std::string>{"Authorization: Bearer tok-123"});
  // A user name and password win over a token, as in MLflow's client; base64 with each padding.
  settings.username = "admin";
  EXPECT_EQ(HttpClient::auth_headers(settings).front(), "Authorization: Bearer tok-123");
  for (const auto& [password, encoded] :
       std::vector<std::pair<std::string, std::string>>{{"s3cret", "YWRtaW46czNjcmV0"},
                                                        {"s3cre", "YWRtaW46czNjcmU="},
                                                        {"s3cr", "YWRtaW46czNjcg=="}}) {
    settings.password = password;
    EXPECT_EQ(HttpClient::auth_headers(settings),
              std::vector<std::string>{"Authorization: Basic " + encoded});
  }
}

TEST_F(Tracking, MlflowWithoutAServerSaysWhatToSet) {
  auto stopped_with = [&](const char* uri, const accel::TrackerValues& kwargs) {
    accel_test::EnvGuard server("MLFLOW_TRACKING_URI", uri);
    accel::Accelerator accelerator(options({"mlflow"}));
    testing::internal::CaptureStderr();
    accelerator.init_trackers("run", {}, {{"mlflow", kwargs}});
    accelerator.log({{"loss", 1.0}}, 0);
    return testing::internal::GetCapturedStderr();
  };
  auto messages = stopped_with(nullptr, {});
  EXPECT_NE(messages.find("tracker 'mlflow' failed in init_trackers: the mlflow tracker needs a "
                          "tracking server: set MLFLOW_TRACKING_URI"),
            std::string::npos)
      << messages;
  messages = stopped_with("sqlite:///runs.db", {});
  EXPECT_NE(messages.find("MLFLOW_TRACKING_URI is 'sqlite:///runs.db' (file and database stores "
                          "are written by MLflow's server: run `mlflow server "
                          "--backend-store-uri sqlite:///runs.db`"),
            std::string::npos)
      << messages;
  messages = stopped_with("http://127.0.0.1:5000", {{"experiment", "x"}});
  EXPECT_NE(messages.find("init_kwargs for 'mlflow' has 'experiment'; it takes run_name, "
                          "description and tracking_uri"),
            std::string::npos)
      << messages;
}
#endif

}  // namespace
