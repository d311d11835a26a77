// The one parser of whole numbers the launcher and the runtime share (accel_common/contract.h).

#include "accel_common/contract.h"

#include <gtest/gtest.h>

#include <limits>

namespace {

using accel::contract::parse_integer;

TEST(ParseInteger, WholeNumbersWithTheirSign) {
  EXPECT_EQ(parse_integer("29500"), 29500);
  EXPECT_EQ(parse_integer("0"), 0);
  EXPECT_EQ(parse_integer("-1"), -1);
  EXPECT_EQ(parse_integer("+8"), 8);
  EXPECT_EQ(parse_integer("007"), 7);
  EXPECT_EQ(parse_integer("9223372036854775807"), std::numeric_limits<int64_t>::max());
}

TEST(ParseInteger, AnythingElseIsRefused) {
  for (const char* text : {"", "29500x", "x29500", " 8", "8 ", "8.0", "1e3", "0x10", "+", "-",
                           "+-1", "--1", "9223372036854775808", "２"}) {
    EXPECT_EQ(parse_integer(text), std::nullopt) << "'" << text << "'";
  }
}

// ACCEL_TIMEOUT and ACCEL_HANG_WATCHDOG: one parser of a number of seconds for both.
TEST(ParseSeconds, DecimalSecondsAboveZero) {
  using accel::contract::parse_seconds;
  EXPECT_EQ(parse_seconds("300"), std::chrono::milliseconds(300000));
  EXPECT_EQ(parse_seconds("0.5"), std::chrono::milliseconds(500));
  EXPECT_EQ(parse_seconds("1e2"), std::chrono::milliseconds(100000));
  for (const char* text : {"", "0", "-1", "x", "5s", " 5", "5 ", "inf", "nan", "1e9", "0x"}) {
    EXPECT_EQ(parse_seconds(text), std::nullopt) << "'" << text << "'";
  }
}

}  // namespace
