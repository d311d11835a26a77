// accel::get_logger on one process, and as rank 1 of a job (from the environment alone): level
// parsing and filtering, the line's layout, main_process_only / all_processes, and the errors.

#include <accel/logging.h>

#include "support/env_guard.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

using accel_test::EnvGuard;

namespace {

// What `fn` writes to stderr.
template <typename Fn>
std::string stderr_of(Fn&& fn) {
  testing::internal::CaptureStderr();
  fn();
  return testing::internal::GetCapturedStderr();
}

}  // namespace

TEST(Logging, ParsesLevelsInAnyCase) {
  EXPECT_EQ(accel::parse_log_level("DEBUG"), accel::LogLevel::Debug);
  EXPECT_EQ(accel::parse_log_level("info"), accel::LogLevel::Info);
  EXPECT_EQ(accel::parse_log_level("Warn"), accel::LogLevel::Warning);
  EXPECT_EQ(accel::parse_log_level("warning"), accel::LogLevel::Warning);
  EXPECT_EQ(accel::parse_log_level("error"), accel::LogLevel::Error);
  EXPECT_EQ(accel::parse_log_level("CRITICAL"), accel::LogLevel::Critical);
  EXPECT_THROW(accel::parse_log_level("verbose"), std::invalid_argument);
}

TEST(Logging, LineCarriesRankLevelNameAndFormattedMessage) {
  auto logger = accel::get_logger("logging_test.layout", accel::LogLevel::Info);
  const std::string out = stderr_of([&] { logger.info("epoch {} loss {:.3f}", 2, 0.123456); });
  EXPECT_NE(out.find("[rank 0] [info] logging_test.layout: epoch 2 loss 0.123\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.front(), '[') << "a timestamp first: " << out;
}

TEST(Logging, LevelFiltersLinesAndIsSharedByName) {
  auto logger = accel::get_logger("logging_test.level", accel::LogLevel::Warning);
  auto same = accel::get_logger("logging_test.level");
  EXPECT_EQ(same.level(), accel::LogLevel::Warning);
  EXPECT_EQ(stderr_of([&] {
              logger.debug("not shown");
              same.info("not shown {}", 1);
            }),
            "");
  EXPECT_NE(
      stderr_of([&] { same.error("shown {}", 1); }).find("[error] logging_test.level: shown 1"),
      std::string::npos);
  same.set_level(accel::LogLevel::Debug);
  EXPECT_TRUE(logger.enabled(accel::LogLevel::Debug));
}

TEST(Logging, LevelComesFromTheEnvironment) {
  {
    EnvGuard level("ACCEL_LOG_LEVEL", "error");
    EXPECT_EQ(accel::get_logger("logging_test.env").level(), accel::LogLevel::Error);
  }
  {
    EnvGuard level("ACCELERATE_LOG_LEVEL", "DEBUG");
    EXPECT_EQ(accel::get_logger("logging_test.env").level(), accel::LogLevel::Debug);
  }
  EnvGuard level("ACCEL_LOG_LEVEL", "loud");
  try {
    accel::get_logger("logging_test.env");
    FAIL() << "a malformed ACCEL_LOG_LEVEL was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("ACCEL_LOG_LEVEL=loud"), std::string::npos) << e.what();
  }
}

TEST(Logging, OtherRanksWriteOnlyWhenAskedTo) {
  EnvGuard rank("RANK", "1"), size("WORLD_SIZE", "2"), local("LOCAL_RANK", "1"),
      local_size("LOCAL_WORLD_SIZE", "2");
  auto logger = accel::get_logger("logging_test.rank1", accel::LogLevel::Info);
  EXPECT_EQ(stderr_of([&] { logger.info("main process only"); }), "");
  EXPECT_NE(stderr_of([&] {
              logger.info(accel::all_processes, "from rank {}", 1);
            }).find("[rank 1] [info] logging_test.rank1: from rank 1"),
            std::string::npos);
  // Rank order needs the Accelerator's process group to wait on; none exists here.
  try {
    logger.info(accel::in_rank_order, "in order");
    FAIL() << "in_rank_order without an Accelerator was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("create the Accelerator"), std::string::npos) << e.what();
  }
}
