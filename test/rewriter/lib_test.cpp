// Unit tests of accel-migrate's library parts that need no parse: the edit set every check writes
// into, the unified diff --diff prints, the atomic file writer, and the scan that decides which
// library headers a file's cached preamble holds.

#include "CompileArgs.h"
#include "EditSet.h"
#include "FileIO.h"
#include "PreambleScan.h"
#include "SourceStyle.h"
#include "UnifiedDiff.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace accel::migrate {
namespace {

Edit replace(unsigned Offset, unsigned Length, std::string Text, std::string Check = "c") {
  return Edit{Offset, Length, std::move(Text), std::move(Check)};
}

// The user's flags after `--` decide; accel-migrate fills in only what they leave out.
TEST(CompileArgs, TheUsersStandardAndIncludesDecide) {
  const auto HasStandard = [](const std::vector<std::string>& Args) {
    return std::any_of(Args.begin(), Args.end(),
                       [](const std::string& Arg) { return Arg.rfind("-std=", 0) == 0; });
  };
  const std::vector<std::string> Defaults = defaultCompileArgs();
  ASSERT_TRUE(HasStandard(Defaults));
  // Nothing given: everything filled in.
  EXPECT_EQ(completingArgs({"clang-tool", "-DNDEBUG"}), Defaults);
  // A standard given, in any spelling: none added, LibTorch's includes still are.
  for (const char* Standard : {"-std=c++20", "--std=gnu++2a", "/std:c++20"}) {
    const auto Added = completingArgs({"clang-tool", Standard});
    EXPECT_FALSE(HasStandard(Added)) << Standard;
    EXPECT_EQ(Added.size(), Defaults.size() - 1) << Standard;
  }
  // LibTorch's includes given, no standard: only the standard added.
  const auto Added = completingArgs({"clang-tool", "-isystem", "/opt/libtorch/include"});
  ASSERT_EQ(Added.size(), 1u);
  EXPECT_TRUE(HasStandard(Added));
  EXPECT_TRUE(completingArgs({"-std=c++17", "-I/opt/libtorch/include"}).empty());
  // A program whose own names hold "torch" (yngtodd/torchkata's src/torchkata.cpp and its
  // include/) names no LibTorch: its includes are still added.
  llvm::SmallString<128> Project;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("torchkata", Project));
  const std::string Include = std::string(Project) + "/include";
  ASSERT_FALSE(llvm::sys::fs::create_directories(Include));
  EXPECT_EQ(completingArgs({"clang-tool", std::string(Project) + "/src/torchkata.cpp", "-I",
                            Include, "-std=c++17"})
                .size(),
            Defaults.size() - 1);
  llvm::sys::fs::remove_directories(Project);
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

// `y.to(device)` -> `y` by one check and `y` -> `all_y` by another compose to `all_y`, in either
// order; an outer edit that rewrites the inner text differently still conflicts.
TEST(EditSet, AnEditInsideAnotherThatKeepsItsTextComposes) {
  const std::string Code = "f(y.to(device));";
  const Edit Drop{2, 12, "y", "remove-placement"};
  const Edit Rename{2, 1, "all_y", "gather"};
  for (bool DropFirst : {true, false}) {
    EditSet Set;
    EXPECT_TRUE(Set.add(DropFirst ? Drop : Rename));
    EXPECT_FALSE(Set.add(DropFirst ? Rename : Drop));
    EXPECT_TRUE(Set.compose(DropFirst ? Rename : Drop, Code));
    EXPECT_EQ(Set.apply(Code), "f(all_y);");
  }
  EditSet Set;
  EXPECT_TRUE(Set.add(Edit{2, 12, "z", "other"}));
  EXPECT_FALSE(Set.compose(Rename, Code));
  EXPECT_EQ(Set.apply(Code), "f(z);");
}

TEST(EditSet, InsertionsAtOneOffsetKeepTheirOrderAndReportChangedRanges) {
  EditSet Set;
  Edit A = replace(3, 0, "a\n"), R = replace(3, 2, "R");
  A.Reformat = R.Reformat = true;
  EXPECT_TRUE(Set.add(A));
  EXPECT_TRUE(Set.add(replace(3, 0, "b")));  // text inside a user's line: not to be formatted
  EXPECT_TRUE(Set.add(R));
  std::vector<std::pair<unsigned, unsigned>> Changed;
  EXPECT_EQ(Set.apply("0123456", &Changed), "012a\nbR56");
  // The trailing line end is not part of the range: formatting stops before the next line.
  EXPECT_EQ(Changed, (std::vector<std::pair<unsigned, unsigned>>{{3, 1}, {6, 1}}));
}

TEST(EditSet, ARemovalSupersedesTheEditsInsideIt) {
  EditSet Set;
  ASSERT_TRUE(Set.add(replace(10, 0, "before\n", "a")));  // an insertion at the start stays
  ASSERT_TRUE(Set.add(replace(14, 4, "device()", "b")));  // inside: goes
  ASSERT_TRUE(Set.add(replace(20, 0, "x", "c")));         // at the end stays
  ASSERT_TRUE(Set.add(replace(30, 2, "y", "d")));         // outside stays
  Set.eraseInside(10, 10);
  ASSERT_TRUE(Set.add(replace(10, 10, "", "e")));
  std::vector<std::string> Checks;
  for (const Edit& E : Set.edits()) Checks.push_back(E.Check);
  EXPECT_EQ(Checks, (std::vector<std::string>{"a", "c", "d", "e"}));
}

TEST(SourceStyle, LinesChangedOnlyInWhitespaceArePutBack) {
  const std::string Original = "int f() {\n    for (auto& x : v)\n        g(x,\n          y);\n}\n";
  // A formatter re-indented the loop, re-wrapped the call and moved the `&`; one real insertion.
  const std::string Formatted = "int f() {\n  h();\n  for (auto &x : v)\n    g(x, y);\n}\n";
  EXPECT_EQ(countWhitespaceOnlyChanges(Original, Formatted), 2u);  // the loop and the call
  const std::string Restored = restoreWhitespaceOnlyChanges(Original, Formatted);
  EXPECT_EQ(Restored, "int f() {\n  h();\n    for (auto& x : v)\n        g(x,\n          y);\n}\n");
  EXPECT_EQ(countWhitespaceOnlyChanges(Original, Restored), 0u);
}

TEST(SourceStyle, NewLinesTakeTheFilesLineEndings) {
  // A file written on Windows: the new lines end as its own do, and none is doubled.
  EXPECT_EQ(matchLineEndings("a\r\nb\r\n", "a\r\nnew\nb\r\n"), "a\r\nnew\r\nb\r\n");
  // Unix endings, or a stray \r\n among them: left as they are.
  EXPECT_EQ(matchLineEndings("a\nb\n", "a\nnew\nb\n"), "a\nnew\nb\n");
  EXPECT_EQ(matchLineEndings("a\r\nb\nc\nd\n", "x\ny\n"), "x\ny\n");
}

TEST(SourceStyle, NewLinesNeverEndInWhitespace) {
  const std::string Original = "void f(  \n    int a);\nint b;   \n";
  // An insertion left "accel, " at the end of a line; the user's own line keeps its blanks.
  const std::string Migrated = "void f(accel, \n    int a);\nint b;   \nint c; \t\r\n";
  EXPECT_EQ(trimNewTrailingWhitespace(Original, Migrated),
            "void f(accel,\n    int a);\nint b;   \nint c;\r\n");
}

TEST(SourceStyle, DerivedFromTheFileItself) {
  const auto Four =
      derivedStyle("int f(int& a) {\n    if (a) {\n        return 1;\n    }\n    return 0;\n}\n");
  EXPECT_EQ(Four.IndentWidth, 4u);
  EXPECT_EQ(Four.PointerAlignment, clang::format::FormatStyle::PAS_Left);
  EXPECT_EQ(Four.ColumnLimit, 80u);
  const auto Two =
      derivedStyle("void g(Net &net, int *p) {\n  net.run(p);\n}\n" + std::string(100, '/') + "\n");
  EXPECT_EQ(Two.IndentWidth, 2u);
  EXPECT_EQ(Two.PointerAlignment, clang::format::FormatStyle::PAS_Right);
  EXPECT_EQ(Two.ColumnLimit, 100u);
}

// The width a file usually keeps to, not its one longest line: a stray 200-column line in a file
// whose lines run to 96 leaves the limit at 96; a file with several lines at 120 keeps 120.
TEST(SourceStyle, OneStrayLongLineDoesNotSetTheWidth) {
  std::string Code = "int main() {\n";
  for (int I = 0; I < 30; ++I)
    Code += "  f(" + std::string(static_cast<size_t>(I < 3 ? 90 : 40), 'x') + ");\n";
  Code += "  // " + std::string(197, 'u') + "\n}\n";
  EXPECT_EQ(derivedStyle(Code).ColumnLimit, 96u);
  std::string Wide = Code;
  for (int I = 0; I < 4; ++I)
    Wide += "int g" + std::to_string(I) + "(" + std::string(111, 'y') + ");\n";
  EXPECT_EQ(derivedStyle(Wide).ColumnLimit, 120u);
}

// Two-space blocks whose statements wrap with four: the wrapped lines are not the block step.
TEST(SourceStyle, ContinuationLinesDoNotSetTheIndentation) {
  const std::string Code =
      "int main() {\n"
      "  auto loader = make(\n"
      "      std::move(data),\n"
      "      options);\n"
      "  torch::Tensor labels =\n"
      "      torch::empty(n);\n"
      "  std::printf(\n"
      "      \"%d\",\n"
      "      n);\n"
      "  if (n)\n"
      "    return 1;\n"
      "}\n";
  const auto Style = derivedStyle(Code);
  EXPECT_EQ(Style.IndentWidth, 2u);
  EXPECT_EQ(Style.ContinuationIndentWidth, 4u);
}

// Arguments aligned under an open parenthesis and `<<` under `<<` are alignment: the
// continuation width is what the statements that wrap by indentation show (prabhuomkar's
// pytorch-cpp: a list of cxxopts options, each aligned one column in, made it 1).
TEST(SourceStyle, AlignedLinesDoNotSetTheContinuationIndentation) {
  const std::string Code =
      "int main() {\n"
      "    options.add_options()\n"
      "            (\"batch_size\", \"The batch size\",\n"
      "             value<int>()->default_value(\"32\"))\n"
      "            (\"epochs\", \"The number of epochs\",\n"
      "             value<int>()->default_value(\"4\"))\n"
      "            (\"rate\", \"The learning rate\",\n"
      "             value<double>()->default_value(\"1e-3\"));\n"
      "    std::cout << \"Epoch \" << epoch\n"
      "              << \", loss \" << loss;\n"
      "    auto loader = make(\n"
      "            std::move(data), options);\n"
      "}\n";
  const auto Style = derivedStyle(Code);
  EXPECT_EQ(Style.IndentWidth, 4u);
  EXPECT_EQ(Style.ContinuationIndentWidth, 8u);
}

// An inserted line is formatted; the author's statement before it, wrapped in a way the
// formatter would join, is left as written.
TEST(SourceStyle, FormattingStaysInsideTheInsertedLines) {
  const std::string Migrated =
      "void f() {\n"
      "  g(1,\n"
      "    2);\n"
      "      h(  3 );\n"
      "  k(4);\n"
      "}\n";
  const unsigned Offset = static_cast<unsigned>(Migrated.find("      h("));
  const unsigned Length = static_cast<unsigned>(std::string("      h(  3 );").size());
  EXPECT_EQ(formatInserted("/nonexistent/f.cpp", Migrated, Migrated, {{Offset, Length}}),
            "void f() {\n  g(1,\n    2);\n  h(3);\n  k(4);\n}\n");
}

// A line a replacement made longer than the original's column limit (80 here) is wrapped; one
// that still fits, and the lines around it, stay as written.
TEST(SourceStyle, RewrittenLinesPastTheColumnLimitAreWrapped) {
  const std::string Original =
      "void f() {\n"
      "  g(first_argument, second_argument);\n"
      "  h(1,   2);\n"
      "}\n";
  const std::string Long =
      "accelerator.prepare(make_optimizer(first_argument, second_argument, "
      "third_argument))";
  const std::string Migrated =
      "void f() {\n"
      "  g(" +
      Long +
      ");\n"
      "  h(1,   2);\n"
      "}\n";
  const unsigned Offset = static_cast<unsigned>(Migrated.find(Long));
  const std::string Formatted = formatInserted("/nonexistent/f.cpp", Original, Migrated, {},
                                               {{Offset, static_cast<unsigned>(Long.size())}});
  EXPECT_NE(Formatted, Migrated);
  EXPECT_NE(Formatted.find("  h(1,   2);\n"), std::string::npos) << Formatted;
  llvm::SmallVector<llvm::StringRef, 8> Lines;
  llvm::StringRef(Formatted).split(Lines, '\n');
  for (llvm::StringRef Line : Lines) EXPECT_LE(Line.size(), 80u) << Formatted;
  // Within the limit: left alone.
  const std::string Short = "prepare(g)";
  const std::string Fits = "void f() {\n  g(" + Short + ");\n  h(1,   2);\n}\n";
  EXPECT_EQ(formatInserted("/nonexistent/f.cpp", Original, Fits, {},
                           {{static_cast<unsigned>(Fits.find(Short)), 10u}}),
            Fits);
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

// A directory of files for the preamble scan; removed at the end.
class PreambleScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char Template[] = "/tmp/accel-preamble-scan-XXXXXX";
    ASSERT_NE(mkdtemp(Template), nullptr);
    Dir = Template;
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf '" + Dir + "'").c_str()), 0); }
  std::string write(const std::string& Name, const std::string& Text) {
    const std::string Path = Dir + "/" + Name;
    const std::string Parent = Path.substr(0, Path.rfind('/'));
    EXPECT_EQ(std::system(("mkdir -p '" + Parent + "'").c_str()), 0);
    std::ofstream(Path) << Text;
    return Path;
  }
  std::vector<std::string> scan(const std::string& File, std::vector<std::string> Args = {}) {
    Args.insert(Args.begin(), "clang-tool");
    return leadingLibraryIncludes(File, Args, Dir);
  }
  std::string Dir;
};

TEST_F(PreambleScanTest, TheLibraryHeadersAFileOpensWith) {
  const std::string Main = write("main.cpp",
                                 "// a comment\n/* and\n another */\n#include <cmath>\n"
                                 "#include <torch/torch.h>\n#include <accel/accel.h>\n"
                                 "#include <torch/torch.h>\nint main() {}\n");
  // accel's own headers are parsed with the file: one entry serves a program before and after
  // its migration.
  EXPECT_EQ(scan(Main), (std::vector<std::string>{"<torch/torch.h>"}));
  const std::string AccelFirst =
      write("accel_first.cpp", "#include <accel/accel.h>\n#include <torch/script.h>\n");
  EXPECT_EQ(scan(AccelFirst), (std::vector<std::string>{"<torch/script.h>"}));
}

TEST_F(PreambleScanTest, ThroughTheProjectsOwnHeaders) {
  write("include/net.h",
        "#ifndef NET_H\n#define NET_H\n#include <torch/torch.h>\nstruct Net {};\n#endif\n");
  write("src/guarded.h", "#pragma once\n#include \"net.h\"\n");
  const std::string Main =
      write("src/main.cpp", "#include \"guarded.h\"\n#include <accel/accel.h>\n");
  // net.h goes on with code after LibTorch: what follows it is not the preamble's.
  EXPECT_EQ(scan(Main, {"-Iinclude"}), (std::vector<std::string>{"<torch/torch.h>"}));
  // Without the include directory the project header is not found: no preamble at all.
  EXPECT_TRUE(scan(Main).empty());
}

TEST_F(PreambleScanTest, NothingAfterADirectiveThatMayChangeTheHeaders) {
  const std::string Define =
      write("define.cpp", "#define TORCH_SOMETHING 1\n#include <torch/torch.h>\n");
  EXPECT_TRUE(scan(Define).empty());
  const std::string After =
      write("after.cpp", "#include <torch/torch.h>\n#if 1\n#include <accel/accel.h>\n#endif\n");
  EXPECT_EQ(scan(After), (std::vector<std::string>{"<torch/torch.h>"}));
  // Forced includes on the command line come before everything: no preamble.
  EXPECT_TRUE(scan(After, {"-include", "config.h"}).empty());
  EXPECT_TRUE(scan(After, {"-include-pch", "mine.pch"}).empty());
}

}  // namespace
}  // namespace accel::migrate
