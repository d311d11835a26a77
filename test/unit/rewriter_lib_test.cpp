// Unit tests of accel-migrate's library parts that need no parse: the edit set every check writes
// into, the unified diff --diff prints, and the atomic file writer.

#include "EditSet.h"
#include "FileIO.h"
#include "UnifiedDiff.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace accel::migrate {
namespace {

Edit replace(unsigned Offset, unsigned Length, std::string Text, std::string Check = "c") {
  return Edit{Offset, Length, std::move(Text), std::move(Check)};
}

TEST(EditSet, IdenticalEditsAreKeptOnceAndOverlapsAreRefused) {
  EditSet Set;
  EXPECT_TRUE(Set.add(replace(4, 3, "X")));
  EXPECT_TRUE(Set.add(replace(4, 3, "X")));  // a template instantiated twice
  EXPECT_EQ(Set.edits().size(), 1u);
  EXPECT_FALSE(Set.add(replace(5, 4, "Y")));  // overlaps, differently
  EXPECT_FALSE(Set.add(replace(5, 0, "Z")));  // an insertion strictly inside a replacement
  EXPECT_TRUE(Set.add(replace(7, 0, "W")));   // at its end: fine
  EXPECT_EQ(Set.apply("0123456789"), "0123XW789");
}

TEST(EditSet, AnEditInsideAnotherOfTheSameCheckIsPartOfIt) {
  EditSet Outer;
  EXPECT_TRUE(Outer.add(replace(2, 6, "whole", "device")));
  EXPECT_TRUE(Outer.add(replace(4, 2, "part", "device")));
  EXPECT_EQ(Outer.apply("0123456789"), "01whole89");

  EditSet InnerFirst;  // the same, arriving the other way round
  EXPECT_TRUE(InnerFirst.add(replace(4, 2, "part", "device")));
  EXPECT_TRUE(InnerFirst.add(replace(2, 6, "whole", "device")));
  EXPECT_EQ(InnerFirst.edits().size(), 1u);
  EXPECT_EQ(InnerFirst.apply("0123456789"), "01whole89");

  EditSet OtherCheck;  // a different check's edit inside is still a conflict
  EXPECT_TRUE(OtherCheck.add(replace(2, 6, "whole", "device")));
  EXPECT_FALSE(OtherCheck.add(replace(4, 2, "part", "prepare")));
}

TEST(EditSet, InsertionsAtOneOffsetKeepTheirOrderAndReportChangedRanges) {
  EditSet Set;
  EXPECT_TRUE(Set.add(replace(3, 0, "a")));
  EXPECT_TRUE(Set.add(replace(3, 0, "b")));
  EXPECT_TRUE(Set.add(replace(3, 2, "R")));
  std::vector<std::pair<unsigned, unsigned>> Changed;
  EXPECT_EQ(Set.apply("0123456", &Changed), "012abR56");
  EXPECT_EQ(Changed, (std::vector<std::pair<unsigned, unsigned>>{{3, 1}, {4, 1}, {5, 1}}));
}

TEST(UnifiedDiff, HunksWithContextAndNothingForEqualTexts) {
  EXPECT_EQ(unifiedDiff("a/f", "b/f", "same\n", "same\n"), "");
  const std::string Old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
  const std::string New = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
  EXPECT_EQ(unifiedDiff("a/f", "b/f", Old, New),
            "--- a/f\n+++ b/f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n");
}

TEST(FileIO, AtomicWriteKeepsPermissionsAndMissingFilesAreErrors) {
  const std::string Path = ::testing::TempDir() + "/accel_fileio_" + std::to_string(::getpid());
  std::ofstream(Path) << "old";
  ::chmod(Path.c_str(), 0750);
  ASSERT_FALSE(static_cast<bool>(writeFileAtomically(Path, "new contents")));
  auto Read = readFile(Path);
  ASSERT_TRUE(static_cast<bool>(Read));
  EXPECT_EQ(*Read, "new contents");
  struct stat Info {};
  ASSERT_EQ(::stat(Path.c_str(), &Info), 0);
  EXPECT_EQ(Info.st_mode & 0777, 0750u);
  ::unlink(Path.c_str());

  auto Missing = readFile(Path + ".missing");
  ASSERT_FALSE(static_cast<bool>(Missing));
  const std::string Message = llvm::toString(Missing.takeError());
  EXPECT_NE(Message.find(".missing"), std::string::npos) << Message;
}

}  // namespace
}  // namespace accel::migrate
