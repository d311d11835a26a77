// Optimizer layouts across tensor-parallel cuts (sharding/optimizer_resharding.h): what a layout
// records of a cut parameter, the files a process reads when the saved cut is not its own, and
// the errors a malformed or mismatched layout gets.

#include "sharding/optimizer_resharding.h"

#include <gtest/gtest.h>

#include <string>

namespace {

using accel::sharding::files_to_read;
using accel::sharding::OptimizerLayout;

/// One parameter group of one weight [rows, cols], cut along `cut_dim` into `tp` parts (-1:
/// whole), NO_SHARD (one unit per parameter, one slice).
OptimizerLayout weight(int64_t rows, int64_t cols, int64_t tp, int64_t cut_dim) {
  OptimizerLayout layout;
  layout.tp = tp;
  std::vector<int64_t> shape{rows, cols};
  if (cut_dim >= 0) shape[static_cast<size_t>(cut_dim)] /= tp;
  const int64_t numel = shape[0] * shape[1];
  OptimizerLayout::Member member{0, 0, numel, cut_dim, shape};
  layout.groups = {{{{member}, numel, numel}}};
  return layout;
}

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(OptimizerLayout, ACutRoundTripsThroughJson) {
  const auto layout = weight(8, 6, 2, 0);
  const auto json = layout.to_json();
  EXPECT_EQ(json["tp"], 2);
  EXPECT_EQ(json["groups"][0][0]["members"][0].dump(), "[0,0,24,0,[4,6]]");
  EXPECT_EQ(OptimizerLayout::from_json(json, "accel_state.json"), layout);
  // A layout written before cuts and shapes were recorded reads as one part, nothing cut, of any
  // shape.
  auto old = json;
  old.erase("tp");
  old["groups"][0][0]["members"][0] = {0, 0, 24};
  const auto read = OptimizerLayout::from_json(old, "accel_state.json");
  EXPECT_EQ(read.tp, 1);
  EXPECT_EQ(read.groups[0][0].members[0].cut_dim, -1);
  EXPECT_EQ(read, weight(4, 6, 1, -1));
  EXPECT_EQ(files_to_read(read, weight(4, 6, 2, 1), 0, 1, "w"), (std::vector<int64_t>{0}));
}

TEST(OptimizerLayout, AMalformedCutIsNamed) {
  auto json = weight(8, 6, 2, 0).to_json();
  json["groups"][0][0]["members"][0] = {0, 0, 24, 2, {4, 6}};
  EXPECT_NE(error_of([&] { OptimizerLayout::from_json(json, "ckpt/accel_state.json"); })
                .find("ckpt/accel_state.json: the optimizer layout has a member whose cut does "
                      "not match its size"),
            std::string::npos);
  json["groups"][0][0]["members"][0] = {0, 0, 24, 0, {5, 6}};
  EXPECT_NE(error_of([&] {
              OptimizerLayout::from_json(json, "ckpt/accel_state.json");
            }).find("whose cut does not match its size"),
            std::string::npos);
  json = weight(8, 6, 2, 0).to_json();
  json["tp"] = 0;
  EXPECT_NE(error_of([&] {
              OptimizerLayout::from_json(json, "ckpt/accel_state.json");
            }).find("has a malformed 'tp'"),
            std::string::npos);
}

TEST(OptimizerLayout, ProcessesReadTheSavedPartsTheirElementsAreIn) {
  const auto whole = weight(8, 6, 1, -1);
  // Saved on tp 2, rows cut: one process reads both parts; on tp 4, part 3 is in saved part 1.
  const auto rows2 = weight(8, 6, 2, 0);
  EXPECT_EQ(files_to_read(rows2, whole, 0, 0, "w"), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(files_to_read(rows2, weight(8, 6, 4, 0), 0, 3, "w"), (std::vector<int64_t>{1}));
  // Columns cut on tp 2 and rows on tp 2: each live part needs both saved parts.
  EXPECT_EQ(files_to_read(weight(8, 6, 2, 1), rows2, 0, 1, "w"), (std::vector<int64_t>{0, 1}));
  // The same cut: this process's own part. From a whole parameter: the first process's file
  // (slice 0 of part 0) or this part's where the checkpoint has one.
  EXPECT_EQ(files_to_read(rows2, rows2, 0, 1, "w"), (std::vector<int64_t>{1}));
  EXPECT_EQ(files_to_read(whole, rows2, 0, 1, "w"), (std::vector<int64_t>{0}));
}

TEST(OptimizerLayout, AParameterOfAnotherWholeShapeIsNamed) {
  auto error = error_of(
      [] { files_to_read(weight(8, 6, 2, 0), weight(6, 8, 1, -1), 0, 0, "ckpt/optimizer_0.pt"); });
  EXPECT_NE(error.find("ckpt/optimizer_0.pt: parameter 0 of parameter group 0 is of shape [8, 6] "
                       "there (24 elements in each of 2 parts) and [6, 8] in this run"),
            std::string::npos)
      << error;
  // Alike cut, another shape.
  error = error_of([] { files_to_read(weight(8, 6, 2, 0), weight(8, 4, 2, 0), 0, 0, "w"); });
  EXPECT_NE(error.find("is of shape [8, 6] there (24 elements in each of 2 parts) and [8, 4]"),
            std::string::npos)
      << error;
}

}  // namespace
