//===- PreambleCache.cpp --------------------------------------------------------------------===//
#include "PreambleCache.h"

#include "FileIO.h"

#include "clang/Basic/DiagnosticOptions.h"
#include "clang/Basic/Version.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "clang/Frontend/Utils.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/LockFileManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA1.h"
#include "llvm/Support/VirtualFileSystem.h"
#include "llvm/Support/xxhash.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>

#include <utime.h>

using namespace clang;

namespace accel::migrate {

namespace {

// Bumped when the entry's layout or what goes into a preamble changes.
constexpr llvm::StringLiteral Format = "accel-migrate preamble 1";
// How long a run waits for another run's build of the same entry (a cold build under the
// sanitizers takes a minute or two).
constexpr unsigned LockWaitSeconds = 900;

std::string pathIn(const std::string &Directory, llvm::StringRef Name) {
  llvm::SmallString<256> Path(Directory);
  llvm::sys::path::append(Path, Name);
  return std::string(Path);
}

std::string keyOf(const PreambleRequest &Request) {
  llvm::SHA1 Hash;
  auto add = [&](llvm::StringRef Text) {
    Hash.update(Text);
    Hash.update(llvm::StringRef("\0", 1));
  };
  add(Format);
  add(getClangFullVersion());
  // Not the directory: the include directories in the command line are absolute (see
  // PreambleRequest), so the same flags in another project's directory read the same headers.
  // The driver by name only (clang++, g++, c++ choose a mode; where the tool is installed does
  // not matter).
  for (size_t I = 0; I < Request.CommandLine.size(); ++I)
    add(I == 0 ? llvm::sys::path::filename(Request.CommandLine[0]) : Request.CommandLine[I]);
  for (const std::string &Include : Request.Includes)
    add(Include);
  return llvm::toHex(Hash.final(), /*LowerCase=*/true).substr(0, 24);
}

std::string preambleText(const PreambleRequest &Request) {
  std::string Text = "// accel-migrate's cached preamble, for the compile command below, run in " +
                     Request.Directory + "\n//";
  for (const std::string &Arg : Request.CommandLine)
    Text += " " + Arg;
  Text += "\n";
  for (const std::string &Include : Request.Includes)
    Text += "#include " + Include + "\n";
  return Text;
}

struct FileStamp {
  uint64_t Size = 0;
  int64_t ModifiedNs = 0;
  bool operator==(const FileStamp &O) const { return Size == O.Size && ModifiedNs == O.ModifiedNs; }
};

std::optional<FileStamp> stampOf(const std::string &Path) {
  llvm::sys::fs::file_status Status;
  if (llvm::sys::fs::status(Path, Status) || !llvm::sys::fs::is_regular_file(Status))
    return std::nullopt;
  return FileStamp{Status.getSize(), std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         Status.getLastModificationTime().time_since_epoch())
                                         .count()};
}

/// The PCH's checksum, or nullopt when it cannot be read.
std::optional<uint64_t> checksumOf(const std::string &Path) {
  auto Buffer = llvm::MemoryBuffer::getFile(Path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!Buffer)
    return std::nullopt;
  return llvm::xxHash64((*Buffer)->getBuffer());
}

/// Why the entry cannot be used as it is, or empty when it can.
std::string problemWith(const std::string &Pch, const std::string &Manifest) {
  auto Text = llvm::MemoryBuffer::getFile(Manifest);
  if (!Text)
    return "missing";
  llvm::SmallVector<llvm::StringRef, 0> Lines;
  (*Text)->getBuffer().split(Lines, '\n', -1, /*KeepEmpty=*/false);
  if (Lines.size() < 2 || Lines[0] != Format)
    return "damaged (" + Manifest + " is not a manifest of this version)";
  // "pch SIZE CHECKSUM"
  llvm::SmallVector<llvm::StringRef, 3> Pch3;
  Lines[1].split(Pch3, ' ');
  uint64_t Size = 0, Sum = 0;
  if (Pch3.size() != 3 || Pch3[0] != "pch" || Pch3[1].getAsInteger(10, Size) ||
      Pch3[2].getAsInteger(16, Sum))
    return "damaged (" + Manifest + ": line 2 is not `pch SIZE CHECKSUM`)";
  // "dep SIZE MTIME PATH", one per header the preamble read.
  for (size_t I = 2; I < Lines.size(); ++I) {
    llvm::StringRef Rest = Lines[I];
    FileStamp Saved;
    llvm::StringRef Word, SizeText, TimeText;
    std::tie(Word, Rest) = Rest.split(' ');
    std::tie(SizeText, Rest) = Rest.split(' ');
    std::tie(TimeText, Rest) = Rest.split(' ');
    if (Word != "dep" || SizeText.getAsInteger(10, Saved.Size) ||
        TimeText.getAsInteger(10, Saved.ModifiedNs) || Rest.empty())
      return "damaged (" + Manifest + ": line " + std::to_string(I + 1) +
             " is not `dep SIZE MTIME PATH`)";
    const std::optional<FileStamp> Now = stampOf(Rest.str());
    if (!Now)
      return "out of date (" + Rest.str() + " is gone)";
    if (!(*Now == Saved))
      return "out of date (" + Rest.str() + " changed)";
  }
  const std::optional<FileStamp> PchStamp = stampOf(Pch);
  if (!PchStamp)
    return "damaged (" + Pch + " is missing)";
  if (PchStamp->Size != Size)
    return "damaged (" + Pch + " has " + std::to_string(PchStamp->Size) + " bytes, not " +
           std::to_string(Size) + ")";
  if (checksumOf(Pch) != Sum)
    return "damaged (" + Pch + " fails its checksum)";
  return "";
}

/// Every file the preamble reads, system headers included: a LibTorch upgrade changes them.
class AllHeaders : public DependencyCollector {
  bool needSystemDependencies() override { return true; }
};

/// Compiles Header to Output with the request's flags. Fills Headers with every file read, or
/// returns the first error.
std::string compilePreamble(const PreambleRequest &Request, const std::string &Header,
                            const std::string &Output, std::vector<std::string> &Headers) {
  std::vector<const char *> Argv;
  for (const std::string &Arg : Request.CommandLine)
    Argv.push_back(Arg.c_str());
  for (const char *Arg : {"-x", "c++-header"})
    Argv.push_back(Arg);
  Argv.push_back(Header.c_str());

  IntrusiveRefCntPtr<llvm::vfs::FileSystem> FS = llvm::vfs::createPhysicalFileSystem();
  FS->setCurrentWorkingDirectory(Request.Directory);
  std::string Errors;
  llvm::raw_string_ostream ErrorStream(Errors);
  IntrusiveRefCntPtr<DiagnosticOptions> DiagOpts = new DiagnosticOptions;
  TextDiagnosticPrinter Printer(ErrorStream, DiagOpts.get());
  IntrusiveRefCntPtr<DiagnosticsEngine> Diags =
      CompilerInstance::createDiagnostics(DiagOpts.get(), &Printer, /*ShouldOwnClient=*/false);
  std::shared_ptr<CompilerInvocation> Invocation = createInvocationFromCommandLine(Argv, Diags, FS);
  if (!Invocation)
    return "the compile command is not one clang understands";
  Invocation->getFrontendOpts().ProgramAction = frontend::GeneratePCH;
  Invocation->getFrontendOpts().OutputFile = Output;
  // The driver asks clang to leak its AST at exit (-disable-free); in a process that goes on,
  // it is freed, as ClangTool does.
  Invocation->getFrontendOpts().DisableFree = false;

  CompilerInstance Compiler;
  Compiler.setInvocation(std::move(Invocation));
  Compiler.createDiagnostics(&Printer, /*ShouldOwnClient=*/false);
  Compiler.createFileManager(FS);
  auto Collector = std::make_shared<AllHeaders>();
  Compiler.addDependencyCollector(Collector);
  GeneratePCHAction Action;
  if (!Compiler.ExecuteAction(Action) || Compiler.getDiagnostics().hasErrorOccurred()) {
    ErrorStream.flush();
    llvm::StringRef First = llvm::StringRef(Errors).split('\n').first;
    return First.empty() ? "clang failed" : First.str();
  }
  for (const std::string &Dependency : Collector->getDependencies()) {
    llvm::SmallString<256> Path(Dependency);
    if (llvm::sys::path::is_relative(Path))
      Path = pathIn(Request.Directory, Dependency);
    llvm::sys::path::remove_dots(Path, true);
    Headers.push_back(std::string(Path));
  }
  return "";
}

} // namespace

struct PreambleCache::Entry {
  std::mutex Mutex; // one thread checks or builds an entry; the others wait, then share it
  bool Checked = false;
  std::string Pch;        // empty when the entry could not be had
  bool Discarded = false; // clang refused it in this run: the rest of the run goes without
};

PreambleCache::PreambleCache(std::string Directory, uint64_t MaxBytes, llvm::raw_ostream &Notes,
                             bool Quiet)
    : Directory(std::move(Directory)), MaxBytes(MaxBytes), Notes(Notes), Quiet(Quiet) {}

PreambleCache::~PreambleCache() = default;

std::string PreambleCache::defaultDirectory() {
  llvm::SmallString<256> Path;
  if (const char *Xdg = std::getenv("XDG_CACHE_HOME"); Xdg && *Xdg && Xdg[0] == '/')
    Path = Xdg;
  else if (const char *Home = std::getenv("HOME"); Home && *Home)
    llvm::sys::path::append(Path, Home, ".cache");
  else
    return "";
  llvm::sys::path::append(Path, "accel", "migrate");
  return std::string(Path);
}

PreambleCache::Entry &PreambleCache::entry(const std::string &Key) {
  std::lock_guard<std::mutex> Lock(Mutex);
  std::unique_ptr<Entry> &Slot = Entries[Key];
  if (!Slot)
    Slot = std::make_unique<Entry>();
  return *Slot;
}

void PreambleCache::note(const std::string &Text) {
  std::lock_guard<std::mutex> Lock(Mutex);
  Notes << "accel-migrate: note: " << Text << "\n";
}

std::string PreambleCache::preambleFor(const PreambleRequest &Request) {
  if (Directory.empty() || Request.Includes.empty())
    return "";
  const std::string Key = keyOf(Request);
  Entry &E = entry(Key);
  std::lock_guard<std::mutex> Lock(E.Mutex);
  if (!E.Checked) {
    E.Pch = build(Key, Request);
    E.Checked = true;
  }
  return E.Discarded ? "" : E.Pch;
}

// Entries not used for this long are removed when another is built, whatever the size bound.
constexpr std::chrono::hours UnusedEntryLifetime(24 * 30);
// A build's temporary file older than this was left by a run that died: builds that are alive
// hold the lock, and a waiting run gives up on it sooner (LockWaitSeconds).
constexpr std::chrono::hours AbandonedBuildAge(2);

static std::string sizeText(uint64_t Bytes) {
  if (Bytes >= (uint64_t(1) << 30) && Bytes % (uint64_t(1) << 30) == 0)
    return std::to_string(Bytes >> 30) + " GiB";
  if (Bytes >= (uint64_t(1) << 20))
    return std::to_string(Bytes >> 20) + " MiB";
  return std::to_string(Bytes) + " bytes";
}

// The files of an entry, after its key.
constexpr const char *EntryFiles[] = {".pch", ".h", ".manifest"};

// A key as keyOf makes it. Housekeeping touches only files named after one, so a --cache-dir
// pointed at a folder of the user's loses nothing else.
static bool isKey(llvm::StringRef Name) {
  return Name.size() == 24 && llvm::all_of(Name, [](char C) { return llvm::isHexDigit(C); });
}

// A file a build writes before renaming it (build's Key.pch-%%%%%%%%.tmp, writeFileAtomically's
// Key.h.accel-migrate-%%%%%%%%).
static bool isTemporary(llvm::StringRef Name) {
  return isKey(Name.take_front(24)) && (Name.endswith(".tmp") || Name.contains(".accel-migrate-"));
}

void PreambleCache::prune(const std::string &Keep) {
  struct Stored {
    std::string Stem;
    std::chrono::system_clock::time_point LastUsed; // the manifest's time: see build()
    uint64_t Bytes = 0;
  };
  auto BytesOf = [](const std::string &Stem) {
    uint64_t Bytes = 0;
    for (const char *Suffix : EntryFiles)
      if (std::optional<FileStamp> Stamp = stampOf(Stem + Suffix))
        Bytes += Stamp->Size;
    return Bytes;
  };
  std::vector<Stored> Entries;
  std::error_code EC;
  const auto Now = std::chrono::system_clock::now();
  for (llvm::sys::fs::directory_iterator It(Directory, EC), End; It != End && !EC;
       It.increment(EC)) {
    const llvm::StringRef Path = It->path();
    const llvm::StringRef Name = llvm::sys::path::filename(Path);
    llvm::sys::fs::file_status Status;
    if (llvm::sys::fs::status(Path, Status))
      continue;
    if (isTemporary(Name) && Now - Status.getLastModificationTime() > AbandonedBuildAge) {
      llvm::sys::fs::remove(Path);
      continue;
    }
    llvm::StringRef Key = Name;
    if (!Key.consume_back(".manifest") || !isKey(Key) || Key == Keep)
      continue;
    const std::string Stem = Path.drop_back(llvm::StringRef(".manifest").size()).str();
    Entries.push_back({Stem, Status.getLastModificationTime(), BytesOf(Stem)});
  }
  uint64_t Total = BytesOf(pathIn(Directory, Keep));
  // Most recently used first: the ones kept while they fit.
  std::sort(Entries.begin(), Entries.end(),
            [](const Stored &A, const Stored &B) { return A.LastUsed > B.LastUsed; });
  size_t Evicted = 0;
  for (const Stored &Entry : Entries) {
    const bool Unused = Now - Entry.LastUsed >= UnusedEntryLifetime;
    const bool OverBound = MaxBytes != 0 && Total + Entry.Bytes > MaxBytes;
    if (!Unused && !OverBound) {
      Total += Entry.Bytes;
      continue;
    }
    for (const char *Suffix : EntryFiles)
      llvm::sys::fs::remove(Entry.Stem + Suffix);
    Evicted += !Unused;
  }
  if (Evicted > 0)
    note("removed " + std::to_string(Evicted) + " least recently used cached preamble" +
         (Evicted == 1 ? "" : "s") + " from " + Directory + " to keep it within " +
         sizeText(MaxBytes) + " (--cache-max-size)");
}

std::string PreambleCache::build(const std::string &Key, const PreambleRequest &Request) {
  const std::string Pch = pathIn(Directory, Key + ".pch");
  const std::string Manifest = pathIn(Directory, Key + ".manifest");
  if (problemWith(Pch, Manifest).empty()) {
    ::utime(Manifest.c_str(), nullptr); // used now: see prune
    return Pch;
  }
  if (std::error_code EC = llvm::sys::fs::create_directories(Directory)) {
    note("no cached preamble: cannot create " + Directory + ": " + EC.message());
    return "";
  }
  // Another run may be building this entry: wait for it, then look again.
  for (;;) {
    llvm::LockFileManager Lock(Pch);
    if (Lock.getState() == llvm::LockFileManager::LFS_Shared) {
      if (Lock.waitForUnlock(LockWaitSeconds) == llvm::LockFileManager::Res_Timeout)
        Lock.unsafeRemoveLockFile();
      if (problemWith(Pch, Manifest).empty())
        return Pch;
      continue;
    }
    // Owned (or no lock could be made: then this run builds without one).
    const std::string Problem = problemWith(Pch, Manifest);
    if (Problem.empty())
      return Pch;
    std::string Includes;
    for (const std::string &Include : Request.Includes)
      Includes += (Includes.empty() ? "" : " ") + Include;
    if (Problem != "missing")
      note("the cached preamble " + Pch + " is " + Problem + "; building it again");
    else if (!Quiet)
      note("building a cached preamble of " + Includes + " in " + Directory +
           " (once for these compile flags)");

    const std::string Header = pathIn(Directory, Key + ".h");
    const std::string Text = preambleText(Request);
    auto Existing = llvm::MemoryBuffer::getFile(Header);
    if (!Existing || (*Existing)->getBuffer() != Text)
      if (llvm::Error Err = writeFileAtomically(Header, Text)) {
        note("no cached preamble: " + llvm::toString(std::move(Err)));
        return "";
      }
    llvm::SmallString<256> Temporary;
    llvm::sys::fs::createUniquePath(pathIn(Directory, Key + ".pch-%%%%%%%%.tmp"), Temporary,
                                    /*MakeAbsolute=*/false);
    const std::string Output(Temporary);
    std::vector<std::string> Headers;
    const std::string Error = compilePreamble(Request, Header, Output, Headers);
    if (!Error.empty()) {
      llvm::sys::fs::remove(Output);
      note("no cached preamble of " + Includes + ": " + Error);
      return "";
    }
    const std::optional<uint64_t> Sum = checksumOf(Output);
    const std::optional<FileStamp> Stamp = stampOf(Output);
    std::string ManifestText = Format.str() + "\n";
    if (Sum && Stamp)
      ManifestText += "pch " + std::to_string(Stamp->Size) + " " + llvm::utohexstr(*Sum) + "\n";
    for (const std::string &Path : Headers)
      if (Path != Header)
        if (std::optional<FileStamp> S = stampOf(Path))
          ManifestText += "dep " + std::to_string(S->Size) + " " + std::to_string(S->ModifiedNs) +
                          " " + Path + "\n";
    if (!Sum || !Stamp || llvm::sys::fs::rename(Output, Pch)) {
      llvm::sys::fs::remove(Output);
      note("no cached preamble: cannot write " + Pch);
      return "";
    }
    if (llvm::Error Err = writeFileAtomically(Manifest, ManifestText)) {
      note("no cached preamble: " + llvm::toString(std::move(Err)));
      return "";
    }
    prune(Key);
    return Pch;
  }
}

void PreambleCache::discard(const std::string &Pch, const std::string &File,
                            const std::string &Why) {
  llvm::StringRef Stem = llvm::StringRef(Pch).drop_back(llvm::StringRef(".pch").size());
  {
    Entry &E = entry(llvm::sys::path::filename(Stem).str());
    std::lock_guard<std::mutex> Lock(E.Mutex);
    if (E.Discarded)
      return;
    E.Discarded = true;
  }
  note("the cached preamble " + Pch + " could not be used for " + File + " (" + Why +
       "); parsed without it, and the entry is removed");
  llvm::sys::fs::remove(Stem + ".manifest");
  llvm::sys::fs::remove(Pch);
}

} // namespace accel::migrate
