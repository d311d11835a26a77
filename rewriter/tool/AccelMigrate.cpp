//===- AccelMigrate.cpp - accel-migrate: single-GPU LibTorch code to libaccel --------------===//
//
// accel-migrate [options] <file>... [-- <compiler args>]
//
//===----------------------------------------------------------------------------------------===//
#include "CheckRegistry.h"
#include "CompileArgs.h"
#include "Migrator.h"

#include "accel_common/contract.h"

#include "clang/Tooling/CompilationDatabase.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>

using namespace accel::migrate;
namespace cl = llvm::cl;

static cl::OptionCategory Category("accel-migrate options");

static cl::list<std::string> Files(cl::Positional, cl::desc("<file>..."), cl::cat(Category));
static cl::opt<std::string> BuildPath("p",
                                      cl::desc("Build directory containing compile_commands.json"),
                                      cl::value_desc("build-dir"), cl::cat(Category));
static cl::opt<bool> Diff("diff", cl::desc("Print a unified diff; leave the files untouched"),
                          cl::cat(Category));
static cl::opt<bool> CheckOnly("check",
                               cl::desc("Exit with 1 when a file would be changed (for CI); "
                                        "change nothing"),
                               cl::cat(Category));
static cl::opt<std::string> OutputFile("o", cl::desc("Write the migrated file here instead"),
                                       cl::value_desc("file"), cl::cat(Category));
static cl::opt<unsigned> Jobs("j", cl::desc("Files parsed in parallel (default 1)"), cl::init(1),
                              cl::cat(Category));
static cl::list<std::string> Only("only", cl::CommaSeparated,
                                  cl::desc("Run only these transformations (see --list-checks)"),
                                  cl::cat(Category));
static cl::list<std::string> Skip("skip", cl::CommaSeparated,
                                  cl::desc("Do not run these transformations"), cl::cat(Category));
static cl::opt<std::string> MixedPrecision(
    "mixed-precision",
    cl::desc("Pass mixed_precision to the inserted Accelerator (no, fp16, bf16, fp8); by default "
             "the launcher's environment decides"),
    cl::cat(Category));
static cl::opt<unsigned>
    AccumulationSteps("gradient-accumulation-steps",
                      cl::desc("Pass gradient_accumulation_steps to the inserted Accelerator"),
                      cl::init(0), cl::cat(Category));
static cl::opt<bool> Annotate("annotate",
                              cl::desc("Leave a '// accel-migrate: ...' comment at each warning"),
                              cl::cat(Category));
// LLVM itself registers a boolean -stats-json, so ours is taken out of argv before LLVM's
// parser sees it; --help lists it under MoreHelp.

static std::string takeStatsJson(int &argc, const char **argv) {
  std::string Path;
  int Out = 1;
  for (int I = 1; I < argc; ++I) {
    llvm::StringRef Arg(argv[I]);
    if (Arg == "--") {
      for (; I < argc; ++I)
        argv[Out++] = argv[I];
      break;
    }
    if (Arg.consume_front("--stats-json") || Arg.consume_front("-stats-json")) {
      if (Arg.consume_front("="))
        Path = Arg.str();
      else if (Arg.empty() && I + 1 < argc)
        Path = argv[++I];
      continue;
    }
    argv[Out++] = argv[I];
  }
  argc = Out;
  return Path;
}
static cl::opt<std::string> HeaderFilter(
    "header-filter",
    cl::desc("Regular expression: headers whose path matches are edited too (default: headers "
             "below each input file's directory, or below the working directory when the input "
             "file is too; system, LibTorch and accel headers never)"),
    cl::cat(Category));
static cl::list<std::string> ExtraArgs("extra-arg",
                                       cl::desc("Additional argument to append to the compiler "
                                                "command line"),
                                       cl::cat(Category));
static cl::opt<bool> ListChecks("list-checks", cl::desc("List the transformations and exit"),
                                cl::cat(Category));
static cl::opt<bool> Quiet("quiet", cl::desc("No summary"), cl::cat(Category));
static cl::opt<std::string>
    CacheDir("cache-dir",
             cl::desc("Keep the precompiled LibTorch preamble here (default: "
                      "${XDG_CACHE_HOME:-~/.cache}/accel/migrate)"),
             cl::value_desc("dir"), cl::cat(Category));
static cl::opt<std::string>
    CacheMaxSize("cache-max-size",
                 cl::desc("Bound on the cache directory: least recently used entries go when a "
                          "new one passes it (K, M or G suffix; 0: no bound; default 2G)"),
                 cl::value_desc("size"), cl::cat(Category));
static cl::opt<bool> NoCache("no-cache",
                             cl::desc("Parse every header of every file, with no cached preamble"),
                             cl::cat(Category));

static cl::opt<bool>
    KeepGoing("keep-going",
              cl::desc("When some input does not compile, still migrate the others (each one "
                       "left out is named; exit code 2)"),
              cl::cat(Category));

// Not in --help: the verification's tests plant a faulty transformation's edits with it.
static cl::opt<std::string> TestingGarbleCheck(
    "testing-garble-check", cl::Hidden,
    cl::desc("For accel-migrate's tests: every edit of this transformation gets a stray token; "
             "the verification must refuse the result"),
    cl::cat(Category));

static cl::opt<bool>
    TestingNoVerify("testing-no-verify", cl::Hidden,
                    cl::desc("For accel-migrate's tests: do not parse the migrated program again"),
                    cl::cat(Category));

static cl::extrahelp MoreHelp(R"(
  --stats-json=<file>  - Write per-file statistics (changes per transformation, warnings) as JSON

The first file parsed with a set of compile flags builds a precompiled preamble of the LibTorch
and accel headers it opens with; later files (and later runs) read it instead of the headers.
An entry is about 125 MB with LibTorch's headers; the cache keeps the most recently used ones
within --cache-max-size. Remove the cache directory to clear it; a changed header, flag or
LibTorch version rebuilds its entry.

With neither -p nor '--', the compiler arguments are worked out: C++17 and LibTorch's include
directories (from $Torch_DIR, $CMAKE_PREFIX_PATH, $LIBTORCH or the standard locations).

Exit codes:
  0  migrated, or nothing to do
  1  --check: some file would be changed
  2  some input does not compile (clang's errors are printed): no file was changed (with
     --keep-going the others were migrated and written); or the
     program cannot be migrated safely; or the migrated program would not compile (every file
     changed is parsed again before anything is written: its errors are printed, each with the
     original line and the transformation that wrote it); no file was changed
  3  an input is missing or unreadable, or a result cannot be written; nothing was written
  4  bad command line
)");

/// "2G", "512M", "100K", "4096": bytes, by powers of 1024; nullopt when not a size.
static std::optional<uint64_t> parseSize(llvm::StringRef Text) {
  uint64_t Unit = 1;
  if (!Text.empty()) {
    switch (llvm::toUpper(Text.back())) {
    case 'K':
      Unit = uint64_t(1) << 10;
      break;
    case 'M':
      Unit = uint64_t(1) << 20;
      break;
    case 'G':
      Unit = uint64_t(1) << 30;
      break;
    default:
      break;
    }
  }
  if (Unit != 1)
    Text = Text.drop_back();
  uint64_t Count = 0;
  if (Text.empty() || Text.getAsInteger(10, Count) || Count > UINT64_MAX / Unit)
    return std::nullopt;
  return Count * Unit;
}

int main(int argc, const char **argv) {
  llvm::InitLLVM Init(argc, argv);
  const std::string StatsJson = takeStatsJson(argc, argv);
  // Everything after '--' is the compile command (this shortens argc).
  std::string Error;
  std::unique_ptr<clang::tooling::CompilationDatabase> Database =
      clang::tooling::FixedCompilationDatabase::loadFromCommandLine(argc, argv, Error);
  cl::HideUnrelatedOptions(Category);
  if (!cl::ParseCommandLineOptions(argc, argv,
                                   "accel-migrate: rewrites single-GPU LibTorch programs to run "
                                   "on libaccel\n",
                                   &llvm::errs()))
    return ExitUsageError;

  if (ListChecks) {
    for (const CheckInfo &Info : checkRegistry())
      llvm::outs() << Info.Name << "\t" << Info.Description << "\n";
    return ExitSuccess;
  }
  if (Files.empty()) {
    return reportError(llvm::errs(), ExitUsageError, "no input files (see --help)");
  }
  const int Modes = int(Diff) + int(CheckOnly) + int(!OutputFile.empty());
  if (Modes > 1) {
    return reportError(llvm::errs(), ExitUsageError, "--diff, --check and -o exclude each other");
  }
  MigratorOptions Options;
  for (const auto *List : {&Only, &Skip})
    for (const std::string &Name : *List)
      if (!isKnownCheck(Name)) {
        return reportError(llvm::errs(), ExitUsageError,
                           "unknown transformation '" + Name + "' (see --list-checks)");
      }
  Options.Checks.Only.insert(Only.begin(), Only.end());
  Options.Checks.Skip.insert(Skip.begin(), Skip.end());
  Options.Checks.Annotate = Annotate;
  Options.TestingGarbleCheck = TestingGarbleCheck;
  Options.TestingNoVerify = TestingNoVerify;
  Options.KeepGoing = KeepGoing;
  Options.Checks.HeaderFilter = HeaderFilter;
  if (!MixedPrecision.empty()) {
    if (!accel::contract::is_one_of(MixedPrecision, accel::contract::mixed_precision_choices())) {
      return reportError(llvm::errs(), ExitUsageError,
                         "--mixed-precision must be one of " +
                             accel::contract::join(accel::contract::mixed_precision_choices()) +
                             ", not '" + MixedPrecision + "'");
    }
    Options.Checks.MixedPrecision = MixedPrecision;
  }
  if (AccumulationSteps > 0)
    Options.Checks.GradientAccumulationSteps = AccumulationSteps;
  Options.Mode = Diff                  ? OutputMode::Diff
                 : CheckOnly           ? OutputMode::Check
                 : !OutputFile.empty() ? OutputMode::OutputFile
                                       : OutputMode::InPlace;
  Options.OutputFile = OutputFile;
  Options.Jobs = Jobs;
  Options.StatsJson = StatsJson;
  Options.ExtraArgs.assign(ExtraArgs.begin(), ExtraArgs.end());
  Options.Quiet = Quiet;
  Options.NoCache = NoCache;
  Options.CacheDir = CacheDir;
  if (!CacheMaxSize.empty()) { // else PreambleCache::DefaultMaxBytes
    const std::optional<uint64_t> Bytes = parseSize(CacheMaxSize);
    if (!Bytes)
      return reportError(llvm::errs(), ExitUsageError,
                         "--cache-max-size takes a size such as 2G, 500M or 0, not '" +
                             CacheMaxSize + "'");
    Options.CacheMaxBytes = *Bytes;
  }

  if (!BuildPath.empty()) {
    Database = clang::tooling::CompilationDatabase::loadFromDirectory(BuildPath, Error);
    if (!Database) {
      return reportError(llvm::errs(), ExitUsageError, BuildPath + ": " + Error);
    }
    Options.ProgramFromDatabase = true;
  } else if (!Database) {
    Database =
        std::make_unique<clang::tooling::FixedCompilationDatabase>(".", defaultCompileArgs());
  } else {
    // '--' given: the user's arguments, plus LibTorch's includes unless they name them, and the
    // standard LibTorch needs unless they choose one. (A fixed database lists no commands of its
    // own: its command line is the one any file gets.)
    std::vector<std::string> Given;
    for (const clang::tooling::CompileCommand &Command :
         Database->getCompileCommands(Files.empty() ? "input.cpp" : Files.front()))
      Given.insert(Given.end(), Command.CommandLine.begin(), Command.CommandLine.end());
    for (const std::string &Arg : completingArgs(Given))
      Options.ExtraArgs.push_back(Arg);
  }
  return runMigration(*Database, Files, Options, llvm::outs(), llvm::errs());
}
