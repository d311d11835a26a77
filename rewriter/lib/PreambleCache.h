//===- PreambleCache.h - Library headers parsed once, kept on disk -----------------*- C++ -*-===//
//
// Nearly all of a LibTorch file's parse is LibTorch's headers. The cache keeps them as a
// precompiled header, one per set of compile flags and library headers, so that every file after
// the first parses only itself. An entry is three files named by a hash of what it was built
// from: KEY.h (the preamble's text, with the flags in a comment), KEY.pch, and KEY.manifest (the
// PCH's checksum and every header it read, with size and modification time). An entry whose
// PCH fails its checksum or whose headers changed is rebuilt, with a note saying why. Builds
// take a lock file, so concurrent runs build an entry once and share it; every file is written
// under a temporary name and renamed, so a reader never sees half of one. When an entry is built,
// entries unused for a month go, and then the least recently used ones until the cache is within
// its size (each run that reads an entry marks it used).
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace accel::migrate {

/// What a preamble is built from.
struct PreambleRequest {
  /// The compile command, driver first, as the parse of the file will run it, without the file
  /// and with its include directories absolute.
  std::vector<std::string> CommandLine;
  /// Where the command runs (relative include directories are relative to it).
  std::string Directory;
  /// The library headers, in order, as spelled: `<torch/torch.h>`.
  std::vector<std::string> Includes;
};

class PreambleCache {
public:
  /// About sixteen LibTorch entries (125 MB each): the flag sets of a few projects and build
  /// types.
  static constexpr uint64_t DefaultMaxBytes = uint64_t(2) << 30;

  /// Notes (entry built, stale, damaged, evicted) go to Notes; Quiet leaves out the first-build
  /// one. MaxBytes bounds the directory's entries (0: no bound); the entry a run is using is
  /// kept even when it alone is larger.
  PreambleCache(std::string Directory, uint64_t MaxBytes, llvm::raw_ostream &Notes, bool Quiet);
  ~PreambleCache();

  /// `${XDG_CACHE_HOME:-$HOME/.cache}/accel/migrate`.
  static std::string defaultDirectory();

  /// The path of a precompiled preamble for Request, built now when missing, stale or damaged.
  /// Empty when none can be had (the cache directory is not writable, the headers do not
  /// compile): the file is then parsed whole, as without a cache.
  std::string preambleFor(const PreambleRequest &Request);

  /// Clang could not use Pch for File (its first error is Why): the entry is removed, so that
  /// the next run builds it again.
  void discard(const std::string &Pch, const std::string &File, const std::string &Why);

private:
  struct Entry;
  Entry &entry(const std::string &Key);
  std::string build(const std::string &Key, const PreambleRequest &Request);
  /// Removes entries no run has used for a month, then the least recently used ones beyond
  /// MaxBytes (never Keep, the entry just built), and builds abandoned by a crashed run.
  void prune(const std::string &Keep);
  void note(const std::string &Text);

  std::string Directory;
  uint64_t MaxBytes;
  llvm::raw_ostream &Notes;
  bool Quiet;
  std::mutex Mutex; // guards Entries and Notes
  std::map<std::string, std::unique_ptr<Entry>> Entries;
};

} // namespace accel::migrate
