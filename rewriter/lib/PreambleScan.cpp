//===- PreambleScan.cpp ---------------------------------------------------------------------===//
#include "PreambleScan.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <set>

namespace accel::migrate {

namespace {

struct Directive {
  std::string Name; // include, pragma, define, ...
  std::string Rest; // the rest of the line, comments removed, trimmed
};

/// The directives a file opens with, up to the first line holding anything else (then
/// EndsInCode is set). Comments and blank lines between them are skipped; a backslash continues
/// a line.
std::vector<Directive> leadingDirectives(llvm::StringRef Text, bool &EndsInCode) {
  std::vector<Directive> Out;
  EndsInCode = false;
  bool InBlockComment = false;
  while (!Text.empty()) {
    // One logical line, continuations joined.
    std::string Line;
    for (;;) {
      auto [Physical, Rest] = Text.split('\n');
      Text = Rest;
      Physical = Physical.rtrim("\r");
      if (Physical.endswith("\\") && !Text.empty()) {
        Line += Physical.drop_back().str();
        continue;
      }
      Line += Physical.str();
      break;
    }
    // Comments out.
    std::string Code;
    for (size_t I = 0; I < Line.size(); ++I) {
      if (InBlockComment) {
        if (Line.compare(I, 2, "*/") == 0) {
          InBlockComment = false;
          ++I;
        }
        continue;
      }
      if (Line.compare(I, 2, "//") == 0)
        break;
      if (Line.compare(I, 2, "/*") == 0) {
        InBlockComment = true;
        ++I;
        Code += ' ';
        continue;
      }
      Code += Line[I];
    }
    llvm::StringRef Trimmed = llvm::StringRef(Code).trim();
    if (Trimmed.empty())
      continue;
    if (!Trimmed.consume_front("#")) {
      EndsInCode = true;
      break;
    }
    Trimmed = Trimmed.ltrim();
    // The directive's name runs to the first character that cannot be in one (or to the end:
    // `#endif`).
    const size_t NameEnd = std::min(
        Trimmed.size(), Trimmed.find_if_not([](char C) { return llvm::isAlnum(C) || C == '_'; }));
    Out.push_back({Trimmed.take_front(NameEnd).str(), Trimmed.drop_front(NameEnd).trim().str()});
  }
  return Out;
}

// accel's own headers are not among them: they are parsed with the file, after the preamble, so
// that a program before its migration, the migration's verification and a later --check of the
// migrated program share one cache entry (130 MB, 10 s to build) instead of two; they are a
// small part of a parse beside LibTorch's.
bool isLibraryHeader(llvm::StringRef Spelled) {
  for (llvm::StringRef Prefix : {"torch/", "ATen/", "c10/", "caffe2/"})
    if (Spelled.startswith(Prefix))
      return true;
  return false;
}

struct IncludePaths {
  std::vector<std::string> Quote;  // -iquote
  std::vector<std::string> User;   // -I
  std::vector<std::string> System; // -isystem, -idirafter
  bool ForcesIncludes = false;     // -include, -imacros, -include-pch
};

// The flags that name an include directory, attached (-Iinclude) or as the next argument.
constexpr llvm::StringLiteral IncludeDirectoryFlags[] = {"-iquote", "-isystem", "-idirafter",
                                                         "--include-directory=", "-I"};

/// Calls Visit(Flag, Directory) on each include directory of CommandLine (after the driver);
/// what Visit leaves in Directory is written back.
template <typename Visitor>
void forEachIncludeDirectory(std::vector<std::string> &CommandLine, Visitor Visit) {
  for (size_t I = 1; I < CommandLine.size(); ++I)
    for (llvm::StringRef Flag : IncludeDirectoryFlags) {
      llvm::StringRef Arg = CommandLine[I];
      if (!Arg.consume_front(Flag))
        continue;
      if (Arg.empty()) {
        if (I + 1 < CommandLine.size())
          Visit(Flag, CommandLine[++I]);
      } else {
        std::string Directory = Arg.str();
        Visit(Flag, Directory);
        CommandLine[I] = (Flag + Directory).str();
      }
      break;
    }
}

IncludePaths includePaths(const std::vector<std::string> &CommandLine,
                          const std::string &Directory) {
  IncludePaths Paths;
  std::vector<std::string> Absolute = withAbsoluteIncludeDirectories(CommandLine, Directory);
  forEachIncludeDirectory(Absolute, [&](llvm::StringRef Flag, const std::string &Dir) {
    (Flag == "-iquote"                            ? Paths.Quote
     : Flag == "-isystem" || Flag == "-idirafter" ? Paths.System
                                                  : Paths.User)
        .push_back(Dir);
  });
  for (llvm::StringRef Arg : CommandLine)
    // -include FILE, -includeFILE, -include-pch, --include[=], -imacros.
    if (Arg.startswith("-include") || Arg == "--include" || Arg.startswith("--include=") ||
        Arg.startswith("-imacros"))
      Paths.ForcesIncludes = true;
  return Paths;
}

enum class ScanEnd {
  Continue, // the file's leading directives are all harmless: the includer goes on
  Stop,     // something that may change what follows: nothing after it joins the preamble
  Unusable, // a project header could not be found: no preamble at all
};

class Scanner {
public:
  explicit Scanner(const IncludePaths &Paths) : Paths(Paths) {}

  ScanEnd scan(const std::string &File, unsigned Depth) {
    if (Depth > 16 || !Seen.insert(File).second)
      return ScanEnd::Continue;
    auto Buffer = llvm::MemoryBuffer::getFile(File);
    if (!Buffer)
      return ScanEnd::Unusable;
    bool EndsInCode = false;
    const std::vector<Directive> Directives = leadingDirectives((*Buffer)->getBuffer(), EndsInCode);
    const llvm::StringRef Dir = llvm::sys::path::parent_path(File);
    std::string Guard; // an include guard opened by this header
    for (size_t I = 0; I < Directives.size(); ++I) {
      const Directive &D = Directives[I];
      if (D.Name == "pragma" && D.Rest == "once")
        continue;
      if (Depth > 0 && D.Name == "ifndef" && Guard.empty() && I + 1 < Directives.size() &&
          Directives[I + 1].Name == "define" && Directives[I + 1].Rest == D.Rest) {
        Guard = D.Rest;
        ++I;
        continue;
      }
      if (D.Name == "endif" && !Guard.empty())
        return ScanEnd::Continue;
      if (D.Name != "include")
        return ScanEnd::Stop;
      const ScanEnd End = include(D.Rest, Dir, Depth);
      if (End != ScanEnd::Continue)
        return End;
    }
    // Code follows: a header's later lines may define what its includer's next headers read.
    return EndsInCode ? ScanEnd::Stop : ScanEnd::Continue;
  }

  std::vector<std::string> Library;

private:
  ScanEnd include(llvm::StringRef Rest, llvm::StringRef Dir, unsigned Depth) {
    const bool Angled = Rest.startswith("<");
    if (!Angled && !Rest.startswith("\""))
      return ScanEnd::Stop; // a macro names the header
    const size_t Close = Rest.find(Angled ? '>' : '"', 1);
    if (Close == llvm::StringRef::npos)
      return ScanEnd::Stop;
    const llvm::StringRef Spelled = Rest.slice(1, Close);
    if (Angled && Spelled.startswith("accel/"))
      return ScanEnd::Continue; // parsed with the file (isLibraryHeader says why)
    // A project header is read in turn; it is found as the compiler would find it.
    std::vector<std::string> Search;
    if (!Angled) {
      Search.push_back(Dir.str());
      Search.insert(Search.end(), Paths.Quote.begin(), Paths.Quote.end());
    }
    Search.insert(Search.end(), Paths.User.begin(), Paths.User.end());
    const std::string Project = find(Search, Spelled);
    if (!Project.empty() && !isLibraryHeader(Spelled))
      return scan(Project, Depth + 1);
    if (isLibraryHeader(Spelled)) {
      const std::string Name = "<" + Spelled.str() + ">";
      if (std::find(Library.begin(), Library.end(), Name) == Library.end())
        Library.push_back(Name);
      return ScanEnd::Continue;
    }
    if (!Angled && find(Paths.System, Spelled).empty())
      return ScanEnd::Unusable; // a quoted header found nowhere we know
    // The standard library, or another system library: it reads the same before or after.
    return ScanEnd::Continue;
  }

  static std::string find(const std::vector<std::string> &Dirs, llvm::StringRef Spelled) {
    for (const std::string &Dir : Dirs) {
      llvm::SmallString<256> Path(Dir);
      llvm::sys::path::append(Path, Spelled);
      if (llvm::sys::fs::is_regular_file(Path)) {
        llvm::sys::path::remove_dots(Path, true);
        return std::string(Path);
      }
    }
    return {};
  }

  const IncludePaths &Paths;
  std::set<std::string> Seen;
};

} // namespace

std::vector<std::string> withAbsoluteIncludeDirectories(std::vector<std::string> CommandLine,
                                                        const std::string &Directory) {
  forEachIncludeDirectory(CommandLine, [&](llvm::StringRef, std::string &Dir) {
    if (!llvm::sys::path::is_relative(Dir))
      return;
    llvm::SmallString<256> Path(Directory);
    llvm::sys::path::append(Path, Dir);
    llvm::sys::path::remove_dots(Path, true);
    Dir = std::string(Path);
  });
  return CommandLine;
}

std::vector<std::string> leadingLibraryIncludes(const std::string &MainFile,
                                                const std::vector<std::string> &CommandLine,
                                                const std::string &Directory) {
  const IncludePaths Paths = includePaths(CommandLine, Directory);
  if (Paths.ForcesIncludes)
    return {};
  Scanner S(Paths);
  if (S.scan(MainFile, 0) == ScanEnd::Unusable)
    return {};
  return S.Library;
}

} // namespace accel::migrate
