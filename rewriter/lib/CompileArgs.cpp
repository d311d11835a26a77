//===- CompileArgs.cpp ----------------------------------------------------------------------===//
#include "CompileArgs.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstdlib>

namespace accel::migrate {

namespace {

void addPrefix(std::vector<std::string> &Roots, llvm::StringRef Prefix) {
  if (Prefix.empty())
    return;
  llvm::SmallString<256> Include(Prefix);
  llvm::sys::path::append(Include, "include");
  Roots.push_back(std::string(Include));
}

std::vector<std::string> splitList(const char *Value, char Sep) {
  std::vector<std::string> Out;
  if (!Value)
    return Out;
  llvm::SmallVector<llvm::StringRef, 8> Parts;
  llvm::StringRef(Value).split(Parts, Sep, -1, false);
  for (llvm::StringRef P : Parts)
    Out.push_back(P.str());
  return Out;
}

bool exists(const std::string &Dir, llvm::StringRef Rel) {
  llvm::SmallString<256> Path(Dir);
  llvm::sys::path::append(Path, Rel);
  return llvm::sys::fs::exists(Path);
}

/// The value of `#define Name <number>` in the file at Path, or -1.
int definedNumber(const std::string &Path, llvm::StringRef Name) {
  auto Buffer = llvm::MemoryBuffer::getFile(Path);
  if (!Buffer)
    return -1;
  llvm::SmallVector<llvm::StringRef, 64> Lines;
  (*Buffer)->getBuffer().split(Lines, '\n');
  for (llvm::StringRef Line : Lines) {
    Line = Line.trim();
    if (!Line.consume_front("#define") || !Line.ltrim().consume_front(Name))
      continue;
    int Value = -1;
    if (!Line.trim().getAsInteger(10, Value))
      return Value;
  }
  return -1;
}

// The directory an include flag at CommandLine[I] names (-I, -isystem, -iquote, -idirafter,
// /I; joined or as the next argument), or "" where CommandLine[I] is not one.
llvm::StringRef includeDirectory(const std::vector<std::string> &CommandLine, size_t I) {
  const llvm::StringRef A(CommandLine[I]);
  for (llvm::StringRef Flag : {"-isystem", "-iquote", "-idirafter", "-I", "/I"}) {
    if (!A.startswith(Flag))
      continue;
    if (A.size() > Flag.size())
      return A.drop_front(Flag.size());
    return I + 1 < CommandLine.size() ? llvm::StringRef(CommandLine[I + 1]) : llvm::StringRef();
  }
  return {};
}

// Whether an include directory is LibTorch's: it holds torch/torch.h, or, where it cannot be
// read from here (relative to a build directory, or another machine's), its path names torch.
// (Not any argument that contains "torch": a program's own torchkata.cpp or -Itorchkata/include
// is not LibTorch.)
bool holdsLibTorch(llvm::StringRef Dir) {
  if (Dir.empty())
    return false;
  if (llvm::sys::fs::is_directory(Dir))
    return exists(std::string(Dir), "torch/torch.h");
  return Dir.contains("torch");
}

} // namespace

std::string torchCxxStandard(const std::vector<std::string> &IncludeDirs) {
  for (const std::string &Dir : IncludeDirs) {
    // 2.x keeps the numbers in torch/headeronly/version.h; older releases in torch/version.h.
    for (const char *Rel : {"torch/headeronly/version.h", "torch/version.h"}) {
      llvm::SmallString<256> Path(Dir);
      llvm::sys::path::append(Path, Rel);
      const int Major = definedNumber(std::string(Path), "TORCH_VERSION_MAJOR");
      const int Minor = definedNumber(std::string(Path), "TORCH_VERSION_MINOR");
      if (Major < 0 || Minor < 0)
        continue;
      // From 2.14 LibTorch's headers refuse anything older than C++20.
      return Major > 2 || (Major == 2 && Minor >= 14) ? "-std=c++20" : "-std=c++17";
    }
  }
  return "-std=c++17";
}

std::vector<std::string> torchIncludeDirs() {
  std::vector<std::string> Roots;
  // Torch_DIR points at .../share/cmake/Torch or .../lib/<triple>/cmake/Torch.
  if (const char *TorchDir = std::getenv("Torch_DIR")) {
    llvm::SmallString<256> Dir(TorchDir);
    for (int Up = 0; Up < 4 && !Dir.empty(); ++Up) {
      llvm::sys::path::remove_filename(Dir);
      addPrefix(Roots, Dir);
    }
  }
  for (const std::string &Prefix : splitList(std::getenv("CMAKE_PREFIX_PATH"), ':'))
    addPrefix(Roots, Prefix);
  if (const char *Libtorch = std::getenv("LIBTORCH"))
    addPrefix(Roots, Libtorch);
  for (const std::string &Dir : splitList(ACCEL_TORCH_INCLUDE_DIRS, ':'))
    Roots.push_back(Dir);
  Roots.push_back("/usr/local/include");
  Roots.push_back("/usr/include");

  for (const std::string &Root : Roots) {
    if (exists(Root, "torch/csrc/api/include/torch/torch.h"))
      return {Root, Root + "/torch/csrc/api/include"};
  }
  return {};
}

std::vector<std::string> defaultCompileArgs() {
  const std::vector<std::string> TorchDirs = torchIncludeDirs();
  std::vector<std::string> Args = {torchCxxStandard(TorchDirs)};
  for (const std::string &Dir : TorchDirs) {
    // The compiler's own directories stay where they are: adding them again with -isystem
    // breaks libstdc++'s #include_next.
    if (Dir == "/usr/include" || Dir == "/usr/local/include")
      continue;
    Args.push_back("-isystem");
    Args.push_back(Dir);
  }
  return Args;
}

std::vector<std::string> completingArgs(const std::vector<std::string> &CommandLine) {
  bool NamesTorch = false, NamesStandard = false;
  for (size_t I = 0; I < CommandLine.size(); ++I) {
    const llvm::StringRef A(CommandLine[I]);
    NamesTorch = NamesTorch || holdsLibTorch(includeDirectory(CommandLine, I));
    NamesStandard = NamesStandard || A.startswith("-std=") || A.startswith("--std=") ||
                    A.startswith("/std:") || A == "-std" || A == "--std";
  }
  std::vector<std::string> Args;
  for (const std::string &Arg : defaultCompileArgs()) {
    const bool Standard = llvm::StringRef(Arg).startswith("-std=");
    if (Standard ? !NamesStandard : !NamesTorch)
      Args.push_back(Arg);
  }
  return Args;
}

std::vector<std::string> toolArgs() {
  std::vector<std::string> Args = {"-resource-dir=" ACCEL_CLANG_RESOURCE_DIR, "-w",
                                   "-Wno-unknown-warning-option"};
  // Already-migrated code includes <accel/accel.h>, also where the compile commands come from a
  // build that does not use accel yet: the build tree's and the install's headers.
  for (const std::string &Dir : splitList(ACCEL_INCLUDE_DIRS, ':'))
    if (exists(Dir, "accel/accel.h") && Dir != "/usr/include" && Dir != "/usr/local/include") {
      Args.push_back("-isystem");
      Args.push_back(Dir);
    }
  return Args;
}

} // namespace accel::migrate
