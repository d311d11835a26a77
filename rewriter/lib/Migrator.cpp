//===- Migrator.cpp -------------------------------------------------------------------------===//
#include "Migrator.h"

#include "CompileArgs.h"
#include "FileIO.h"
#include "MigrationAction.h"
#include "MigrationResult.h"
#include "MigrationVerifier.h"
#include "PreambleCache.h"
#include "PreambleScan.h"
#include "SourceStyle.h"
#include "UnifiedDiff.h"

#include "clang/Basic/FileManager.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "clang/Tooling/ArgumentsAdjusters.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ThreadPool.h"

#include <map>
#include <numeric>
#include <optional>
#include <set>

using namespace clang;

namespace accel::migrate {

namespace {

// Paths are shown relative to the working directory when below it, as a compiler would.
std::string displayPath(const std::string &Path) {
  llvm::SmallString<256> Cwd;
  if (llvm::sys::fs::current_path(Cwd))
    return Path;
  llvm::SmallString<256> RealCwd;
  if (!llvm::sys::fs::real_path(Cwd, RealCwd))
    Cwd = RealCwd;
  const std::string Prefix = std::string(Cwd) + "/";
  return llvm::StringRef(Path).startswith(Prefix) ? Path.substr(Prefix.size()) : Path;
}

struct MergedFile {
  FileResult Result;
  std::string Original;
  std::string Migrated;
  bool changed() const { return Migrated != Original; }
};

/// Every file the run touches, by real path: the inputs that compiled and the headers they edit.
using MergedFiles = std::map<std::string, MergedFile>;

int fail(llvm::raw_ostream &Err, int Code, const llvm::Twine &Message) {
  return reportError(Err, Code, Message);
}
int fail(llvm::raw_ostream &Err, int Code, llvm::Error E, llvm::StringRef Suffix = "") {
  return reportError(Err, Code, llvm::toString(std::move(E)) + Suffix);
}

/// Phase 1: every input must be readable before anything runs; paths become real and absolute.
int collectInputs(const std::vector<std::string> &Files, const MigratorOptions &Options,
                  std::vector<std::string> &Inputs, llvm::raw_ostream &Err) {
  for (const std::string &File : Files) {
    auto Content = readFile(File);
    if (!Content)
      return fail(Err, ExitFileError, Content.takeError());
    Inputs.push_back(absolutePath(File));
  }
  if (Options.Mode == OutputMode::OutputFile && Inputs.size() != 1)
    return fail(Err, ExitUsageError, "-o takes exactly one input file");
  return ExitSuccess;
}

/// The request for File's preamble: its compile command as ClangTool will run it (the same
/// adjusters, then Extra), without the file. No request (no includes) when the file has no
/// single compile command or opens with something a preamble would change.
PreambleRequest preambleRequest(const tooling::CompilationDatabase &Database,
                                const std::string &File, const std::vector<std::string> &Extra) {
  PreambleRequest Request;
  const std::vector<tooling::CompileCommand> Commands = Database.getCompileCommands(File);
  if (Commands.size() != 1)
    return Request;
  const tooling::CompileCommand &Command = Commands[0];
  tooling::ArgumentsAdjuster Adjust = tooling::combineAdjusters(
      tooling::combineAdjusters(tooling::getClangStripOutputAdjuster(),
                                tooling::getClangSyntaxOnlyAdjuster()),
      tooling::combineAdjusters(
          tooling::getClangStripDependencyFileAdjuster(),
          tooling::getInsertArgumentAdjuster(Extra, tooling::ArgumentInsertPosition::END)));
  std::vector<std::string> CommandLine = Adjust(Command.CommandLine, Command.Filename);
  const auto Named = std::remove(CommandLine.begin() + 1, CommandLine.end(), Command.Filename);
  if (Named == CommandLine.end())
    return Request;
  CommandLine.erase(Named, CommandLine.end());
  llvm::SmallString<256> Directory(Command.Directory);
  llvm::sys::fs::make_absolute(Directory);
  Request.Includes = leadingLibraryIncludes(File, CommandLine, std::string(Directory));
  Request.CommandLine = withAbsoluteIncludeDirectories(CommandLine, std::string(Directory));
  Request.Directory = std::string(Directory);
  return Request;
}

/// The line of a parse's diagnostics that says what went wrong: its first error, not the
/// "In file included from" lines that lead to it.
std::string firstError(llvm::StringRef Diagnostics) {
  llvm::SmallVector<llvm::StringRef> Lines;
  Diagnostics.split(Lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef Line : Lines)
    if (Line.contains("error: "))
      return Line.trim().str();
  return Lines.empty() ? std::string("no diagnostic") : Lines.front().trim().str();
}

/// Parses File and runs the checks on it. Diagnostics go to Diagnostics when given (a parse
/// with the cached preamble, which may be retried without), else to the terminal.
bool parseAndCheck(const tooling::CompilationDatabase &Database, const std::string &File,
                   const std::vector<std::string> &Args, const MigrateOptions &Checks,
                   TranslationUnitResult &Result, std::string *Diagnostics) {
  tooling::ClangTool Tool(Database, {File});
  Tool.appendArgumentsAdjuster(
      tooling::getInsertArgumentAdjuster(Args, tooling::ArgumentInsertPosition::END));
  std::unique_ptr<llvm::raw_string_ostream> Stream;
  IntrusiveRefCntPtr<DiagnosticOptions> DiagOpts = new DiagnosticOptions;
  std::unique_ptr<TextDiagnosticPrinter> Printer;
  if (Diagnostics) {
    Stream = std::make_unique<llvm::raw_string_ostream>(*Diagnostics);
    Printer = std::make_unique<TextDiagnosticPrinter>(*Stream, DiagOpts.get());
    Tool.setDiagnosticConsumer(Printer.get());
  }
  const auto Factory = newMigrationActionFactory(Checks, Result);
  const bool Parsed = Tool.run(Factory.get()) == 0 && !Result.Failed;
  if (Stream)
    Stream->flush();
  Result.Failed = !Parsed;
  return Parsed;
}

/// Phase 2: parses each input and runs the checks on it, several inputs at a time; with the
/// cached preamble when the file can use one. A program in several files is one program: each
/// file's migration tells the others what they must know of it (ProgramSummary), and a file is
/// migrated again while what it is told changes (a call chain through N files takes N rounds).
class CheckRun {
public:
  CheckRun(const tooling::CompilationDatabase &Database, std::vector<std::string> &Inputs,
           const MigratorOptions &Options, const std::vector<std::string> &Extra,
           std::optional<PreambleCache> &Cache, llvm::raw_ostream &Err)
      : Database(Database), Inputs(Inputs), Options(Options), Extra(Extra), Cache(Cache), Err(Err),
        Results(Inputs.size()), Checks(Options.Checks),
        Pool(llvm::hardware_concurrency(std::max(1u, Options.Jobs))) {
    if (Checks.WorkingDirectory.empty()) {
      llvm::SmallString<256> Current, Real;
      if (!llvm::sys::fs::current_path(Current) && !llvm::sys::fs::real_path(Current, Real) &&
          Real != "/")
        Checks.WorkingDirectory = Real.str().str();
    }
    FileChecks.assign(Inputs.size(), Checks);
  }

  std::vector<TranslationUnitResult> run() {
    Pending.resize(Inputs.size());
    std::iota(Pending.begin(), Pending.end(), 0);
    runRounds();
    if (Options.ProgramFromDatabase)
      addCallersFromDatabase();
    return std::move(Results);
  }

private:
  void migrate(size_t I, const MigrateOptions &With) {
    Results[I] = TranslationUnitResult();
    if (Cache) {
      const std::string Pch = Cache->preambleFor(preambleRequest(Database, Inputs[I], Extra));
      if (!Pch.empty()) {
        std::vector<std::string> WithPch = Extra;
        // No error count either: a file that fails here is parsed again, and reported then.
        WithPch.insert(WithPch.end(), {"-include-pch", Pch, "-fno-caret-diagnostics"});
        MigrateOptions WithPreamble = With;
        WithPreamble.CachedPreamble = true;
        std::string Diagnostics;
        if (parseAndCheck(Database, Inputs[I], WithPch, WithPreamble, Results[I], &Diagnostics))
          return;
        // The same file parsed whole decides: a real error is reported from there.
        TranslationUnitResult Whole;
        if (parseAndCheck(Database, Inputs[I], Extra, With, Whole, nullptr))
          Cache->discard(Pch, displayPath(Inputs[I]), firstError(Diagnostics));
        Results[I] = std::move(Whole);
        return;
      }
    }
    parseAndCheck(Database, Inputs[I], Extra, With, Results[I], nullptr);
  }

  void runRounds() {
    // Each round can only add to what the files know, and what they know is bounded by the
    // program: the bound on rounds is a guard, not the way out.
    for (unsigned Round = 0; !Pending.empty() && Round < 8; ++Round) {
      for (size_t I : Pending)
        Pool.async([&, I] { migrate(I, FileChecks[I]); });
      Pool.wait();
      Pending.clear();
      for (size_t I = 0; I < Inputs.size() && Inputs.size() > 1; ++I) {
        if (Results[I].Failed)
          continue;
        ProgramSummary Others;
        for (size_t J = 0; J < Inputs.size(); ++J)
          if (J != I && !Results[J].Failed)
            Others.merge(Results[J].Summary);
        ProgramSummary Relevant = ProgramSummary::relevantTo(Results[I].Summary, Others);
        if (Relevant != FileChecks[I].OtherFiles) {
          FileChecks[I].OtherFiles = std::move(Relevant);
          Pending.push_back(I);
        }
      }
    }
  }

  /// With a compile database, the program is more than the files given: when they do not define
  /// main but changed what their callers must do, the database's files that call them are
  /// migrated with them.
  void addCallersFromDatabase() {
    ProgramSummary Given;
    for (const TranslationUnitResult &Result : Results)
      if (!Result.Failed)
        Given.merge(Result.Summary);
    std::set<std::string> Wanted;
    for (const auto &Parameter : Given.TrainedModelParameters)
      Wanted.insert(Parameter.first);
    // A function that binds the process's Accelerator needs main to create one.
    const bool WantMain = Given.BindsAccelerator;
    if (Given.DefinesMain || (Wanted.empty() && !WantMain))
      return;
    const size_t First = Inputs.size();
    for (const std::string &File : Database.getAllFiles()) {
      const std::string Path = absolutePath(File);
      if (std::find(Inputs.begin(), Inputs.end(), Path) == Inputs.end())
        Inputs.push_back(Path);
    }
    Results.resize(Inputs.size());
    FileChecks.resize(Inputs.size(), Checks);
    for (size_t I = First; I < Inputs.size(); ++I)
      Pool.async([&, I] { migrate(I, FileChecks[I]); });
    Pool.wait();
    keepCallers(First, Wanted, WantMain);
    if (Inputs.size() > First) {
      Pending.assign(Inputs.size(), 0);
      std::iota(Pending.begin(), Pending.end(), 0);
      runRounds();
    }
  }

  /// Of the database's files from `First` on, keeps those that call what the given files
  /// change (`Wanted`, by USR), and with WantMain the one defining main (which creates the
  /// Accelerator the given files bind); the others are none of this run's business.
  void keepCallers(size_t First, const std::set<std::string> &Wanted, bool WantMain) {
    std::vector<std::string> KeptInputs(Inputs.begin(), Inputs.begin() + First);
    std::vector<TranslationUnitResult> KeptResults;
    for (size_t I = 0; I < First; ++I)
      KeptResults.push_back(std::move(Results[I]));
    std::vector<MigrateOptions> KeptChecks(FileChecks.begin(), FileChecks.begin() + First);
    for (size_t I = First; I < Inputs.size(); ++I) {
      const bool Calls = !Results[I].Failed && ((WantMain && Results[I].Summary.DefinesMain) ||
                                                llvm::any_of(Wanted, [&](const std::string &Usr) {
                                                  return Results[I].Summary.called(Usr);
                                                }));
      if (!Calls)
        continue;
      if (!Options.Quiet)
        Err << "accel-migrate: note: " << displayPath(Inputs[I])
            << " (from the compile database) calls what the given files change; it is migrated "
               "with them\n";
      KeptInputs.push_back(Inputs[I]);
      KeptResults.push_back(std::move(Results[I]));
      KeptChecks.push_back(Checks);
    }
    Inputs = std::move(KeptInputs);
    Results = std::move(KeptResults);
    FileChecks = std::move(KeptChecks);
  }

  const tooling::CompilationDatabase &Database;
  std::vector<std::string> &Inputs;
  const MigratorOptions &Options;
  const std::vector<std::string> &Extra;
  std::optional<PreambleCache> &Cache;
  llvm::raw_ostream &Err;
  std::vector<TranslationUnitResult> Results;
  MigrateOptions Checks;
  std::vector<MigrateOptions> FileChecks;
  std::vector<size_t> Pending;
  llvm::ThreadPool Pool;
};

std::vector<TranslationUnitResult>
runChecks(const tooling::CompilationDatabase &Database, std::vector<std::string> &Inputs,
          const MigratorOptions &Options, const std::vector<std::string> &Extra,
          std::optional<PreambleCache> &Cache, llvm::raw_ostream &Err) {
  return CheckRun(Database, Inputs, Options, Extra, Cache, Err).run();
}

/// Phase 3: one result per file. A header seen by several inputs is edited once; an input that
/// did not compile is left out, with every header edit it proposed (that would be half a
/// migration), and named in `Failed`.
MergedFiles mergeResults(const std::vector<std::string> &Inputs,
                         std::vector<TranslationUnitResult> &Results,
                         std::vector<std::string> &Failed) {
  MergedFiles Merged;
  for (size_t I = 0; I < Inputs.size(); ++I) {
    if (Results[I].Failed) {
      Failed.push_back(Inputs[I]);
      continue;
    }
    Merged[Inputs[I]]; // every input is reported, changed or not
    for (auto &[Path, File] : Results[I].Files) {
      FileResult &Into = Merged[Path].Result;
      for (const Edit &E : File.Edits.edits())
        if (!Into.Edits.add(E))
          Into.Warnings.insert(Warning{Path, 0, 0,
                                       "files disagree on how to change this header; the "
                                       "first file's change is kept",
                                       E.Check});
      Into.Applied.insert(File.Applied.begin(), File.Applied.end());
      Into.Warnings.insert(File.Warnings.begin(), File.Warnings.end());
    }
  }
  for (const std::string &Path : Failed)
    Merged.erase(Path);
  return Merged;
}

/// For tests: a stray token at the start of each edit of Check that writes code, after its
/// indentation, as a faulty transformation would leave it.
void garbleEdits(MergedFiles &Merged, const std::string &Check) {
  for (auto &[Path, File] : Merged) {
    EditSet Garbled;
    for (Edit E : File.Result.Edits.edits()) {
      if (E.Check == Check && llvm::StringRef(E.Text).trim().size() > 0) {
        const size_t Code = E.Text.find_first_not_of(" \t\n");
        E.Text.insert(Code, "@ ");
      }
      Garbled.add(E);
    }
    File.Result.Edits = std::move(Garbled);
  }
}

/// Phase 4: each file's migrated text: the edits applied, the inserted lines formatted in the
/// file's style, lines that changed only in whitespace put back, and no new line ending in
/// whitespace.
int renderFiles(MergedFiles &Merged, llvm::raw_ostream &Err) {
  for (auto &[Path, File] : Merged) {
    auto Content = readFile(Path);
    if (!Content)
      return fail(Err, ExitFileError, Content.takeError());
    File.Original = *Content;
    std::vector<std::pair<unsigned, unsigned>> Inserted, Rewritten;
    File.Migrated = File.Result.Edits.apply(File.Original, &Inserted, &Rewritten);
    File.Migrated = matchLineEndings(
        File.Original,
        trimNewTrailingWhitespace(
            File.Original, restoreWhitespaceOnlyChanges(
                               File.Original, formatInserted(Path, File.Original, File.Migrated,
                                                             Inserted, Rewritten))));
  }
  return ExitSuccess;
}

/// Phase 4b: the migrated program must compile. Each input that compiled is parsed again with
/// every migrated text in place (the same command, the same preamble); each error is shown where
/// it stands in the migrated text, with the original line and the transformations that wrote it.
/// Returns whether the migration compiles.
bool verifyMerged(const tooling::CompilationDatabase &Database,
                  const std::vector<std::string> &Inputs, const std::vector<std::string> &Failed,
                  const MergedFiles &Merged, const std::vector<std::string> &Extra,
                  std::optional<PreambleCache> &Cache, llvm::raw_ostream &Err) {
  std::map<std::string, MigratedText> Texts;
  bool Changed = false;
  for (const auto &[Path, File] : Merged) {
    Texts[Path] = MigratedText{File.Original, File.Migrated, &File.Result.Edits};
    Changed = Changed || File.changed();
  }
  if (!Changed)
    return true;
  std::vector<std::string> Compiled;
  for (const std::string &Input : Inputs)
    if (std::find(Failed.begin(), Failed.end(), Input) == Failed.end())
      Compiled.push_back(Input);
  // The preamble the migration parsed with: LibTorch's headers the file opens with. What the
  // migration added (<accel/accel.h>) is parsed from its text, as accel's headers always are
  // (PreambleScan.cpp says why); the library's template bodies are not instantiated
  // (newVerificationActionFactory). About 1 s a file here, beside 0.5 s for the migration.
  auto PchFor = [&](const std::string &File) {
    return Cache ? Cache->preambleFor(preambleRequest(Database, File, Extra)) : std::string();
  };
  const auto Errors = verifyMigration(Database, Compiled, Texts, Extra, PchFor);
  for (const MigratedError &E : Errors) {
    if (E.File.empty()) {
      Err << "accel-migrate: error: " << E.Message << " (in the migrated program)\n";
      continue;
    }
    Err << displayPath(E.File) << ":" << E.Line << ":" << E.Column << ": error: " << E.Message
        << " (in the migrated text)\n";
    if (E.OriginalLine == 0)
      continue;
    std::string Checks;
    for (const std::string &Check : E.Checks)
      Checks += (Checks.empty() ? "accel-migrate-" : ", accel-migrate-") + Check;
    Err << displayPath(E.File) << ":" << E.OriginalLine << ": note: ";
    if (E.OnChangedLine)
      Err << "written by " << (Checks.empty() ? std::string("the migration") : Checks)
          << " at the original's line " << E.OriginalLine << "\n";
    else
      Err << "the original's line " << E.OriginalLine
          << ", unchanged: a change elsewhere broke it\n";
  }
  return Errors.empty();
}

/// Phase 5: the warnings of every file, in file and line order, as clang prints its own.
void reportWarnings(const MergedFiles &Merged, llvm::raw_ostream &Err) {
  std::set<Warning> All;
  for (const auto &[Path, File] : Merged)
    All.insert(File.Result.Warnings.begin(), File.Result.Warnings.end());
  for (const Warning &W : All)
    Err << displayPath(W.File) << ":" << W.Line << ":" << W.Column << ": warning: " << W.Message
        << " [accel-migrate-" << W.Check << "]\n";
}

/// Phase 6, in place: all or nothing. Every file to change must be writable before the first is
/// written, and each is replaced atomically.
int writeInPlace(MergedFiles &Merged, llvm::raw_ostream &Err) {
  for (const auto &[Path, File] : Merged)
    if (File.changed())
      if (llvm::Error E = checkWritable(Path))
        return fail(Err, ExitFileError, std::move(E), "; no file was changed");
  for (const auto &[Path, File] : Merged)
    if (File.changed())
      if (llvm::Error E = writeFileAtomically(Path, File.Migrated))
        return fail(Err, ExitFileError, std::move(E));
  return ExitSuccess;
}

/// Phase 6, -o: the one input's result goes to OutputFile; other files are named, not written.
int writeOutputFile(MergedFiles &Merged, const std::string &Input, const std::string &OutputFile,
                    llvm::raw_ostream &Err) {
  if (Merged.count(Input) == 0)
    return ExitSuccess; // failed to compile: nothing written
  for (const auto &[Path, File] : Merged)
    if (Path != Input && File.changed())
      Err << "accel-migrate: warning: " << displayPath(Path)
          << " would also change, but -o writes only the input file\n";
  if (llvm::Error E = checkWritable(OutputFile))
    return fail(Err, ExitFileError, std::move(E));
  if (llvm::Error E = writeFileAtomically(OutputFile, Merged[Input].Migrated))
    return fail(Err, ExitFileError, std::move(E));
  return ExitSuccess;
}

/// Phase 6: the result, as the mode asks. Returns the exit code so far, or a file error.
int emitResults(MergedFiles &Merged, const std::vector<std::string> &Inputs,
                const MigratorOptions &Options, int Exit, llvm::raw_ostream &Out,
                llvm::raw_ostream &Err) {
  switch (Options.Mode) {
  case OutputMode::Diff:
    for (const auto &[Path, File] : Merged) {
      const std::string Shown = displayPath(Path);
      Out << unifiedDiff("a/" + Shown, "b/" + Shown, File.Original, File.Migrated);
    }
    return Exit;
  case OutputMode::Check: {
    bool AnyChange = false;
    for (const auto &[Path, File] : Merged)
      if (File.changed()) {
        Err << "accel-migrate: " << displayPath(Path) << " would be migrated\n";
        AnyChange = true;
      }
    return AnyChange && Exit == ExitSuccess ? ExitWouldChange : Exit;
  }
  case OutputMode::OutputFile:
    if (const int Code = writeOutputFile(Merged, Inputs[0], Options.OutputFile, Err))
      return Code;
    return Exit;
  case OutputMode::InPlace:
    if (const int Code = writeInPlace(Merged, Err))
      return Code;
    return Exit;
  }
  return Exit;
}

/// Phase 7: one summary line per file on Err, and the same as JSON in StatsJson for machines.
int summarize(const MergedFiles &Merged, const std::vector<std::string> &Failed,
              const MigratorOptions &Options, int Exit, llvm::raw_ostream &Err) {
  llvm::json::Array JsonFiles;
  for (const auto &[Path, File] : Merged) {
    unsigned Total = 0;
    std::string Parts;
    llvm::json::Object JsonCounts;
    for (const auto &[Check, N] : File.Result.appliedByCheck()) {
      Total += N;
      Parts += (Parts.empty() ? "" : ", ") + Check + " " + std::to_string(N);
      JsonCounts[Check] = N;
    }
    const size_t Warnings = File.Result.Warnings.size();
    if (!Options.Quiet)
      Err << "accel-migrate: " << displayPath(Path) << ": " << Total << " change"
          << (Total == 1 ? "" : "s") << (Parts.empty() ? "" : " (" + Parts + ")") << ", "
          << Warnings << " warning" << (Warnings == 1 ? "" : "s") << "\n";
    JsonFiles.push_back(llvm::json::Object{
        {"file", Path},
        {"changes", std::move(JsonCounts)},
        {"total_changes", Total},
        {"warnings", static_cast<int64_t>(Warnings)},
        {"whitespace_only_lines", countWhitespaceOnlyChanges(File.Original, File.Migrated)},
        {"changed", File.changed()}});
  }
  if (Options.StatsJson.empty())
    return Exit;
  llvm::json::Array JsonFailed;
  for (const std::string &Path : Failed)
    JsonFailed.push_back(Path);
  const llvm::json::Value Stats = llvm::json::Object{
      {"files", std::move(JsonFiles)}, {"failed", std::move(JsonFailed)}, {"exit_code", Exit}};
  std::string Text;
  llvm::raw_string_ostream OS(Text);
  OS << llvm::formatv("{0:2}", Stats) << "\n";
  OS.flush();
  if (llvm::Error E = writeFileAtomically(Options.StatsJson, Text))
    return fail(Err, ExitFileError, std::move(E));
  return Exit;
}

/// A file whose migration would be unsafe stops the whole run before anything is written: the
/// files of one program are migrated together or not at all.
bool refused(const std::vector<TranslationUnitResult> &Results, llvm::raw_ostream &Err) {
  std::set<Warning> All;
  for (const TranslationUnitResult &Result : Results)
    All.insert(Result.Refusals.begin(), Result.Refusals.end());
  for (const Warning &W : All)
    Err << displayPath(W.File) << ":" << W.Line << ":" << W.Column << ": error: " << W.Message
        << " [accel-migrate-" << W.Check << "]\n";
  if (!All.empty())
    reportError(Err, ExitParseError,
                "the program cannot be migrated safely (above); no file was "
                "changed");
  return !All.empty();
}

} // namespace

int reportError(llvm::raw_ostream &Err, int Code, const llvm::Twine &Message) {
  Err << "accel-migrate: error: " << Message << "\n";
  return Code;
}

int runMigration(const tooling::CompilationDatabase &Database,
                 const std::vector<std::string> &Files, const MigratorOptions &Options,
                 llvm::raw_ostream &Out, llvm::raw_ostream &Err) {
  std::vector<std::string> Inputs;
  if (const int Code = collectInputs(Files, Options, Inputs, Err))
    return Code;
  std::vector<std::string> Extra = toolArgs();
  Extra.insert(Extra.end(), Options.ExtraArgs.begin(), Options.ExtraArgs.end());
  std::optional<PreambleCache> Cache;
  if (!Options.NoCache)
    Cache.emplace(Options.CacheDir.empty() ? PreambleCache::defaultDirectory() : Options.CacheDir,
                  Options.CacheMaxBytes, Err, Options.Quiet);
  auto Results = runChecks(Database, Inputs, Options, Extra, Cache, Err);
  if (refused(Results, Err))
    return ExitParseError;
  std::vector<std::string> Failed;
  MergedFiles Merged = mergeResults(Inputs, Results, Failed);
  for (const std::string &Path : Failed)
    fail(Err, ExitParseError,
         displayPath(Path) + " does not compile (errors above); it was left untouched");
  // The files of one program are migrated together: written in place, the others would call into
  // a file that stayed single-process (an Accelerator threaded through a call it does not take).
  // --diff still shows what the files that parse would become.
  if (!Failed.empty() && !Options.KeepGoing && Options.Mode == OutputMode::InPlace)
    return fail(Err, ExitParseError,
                "the program does not compile as given; no file was changed (--keep-going "
                "writes the files that do)");
  if (!Options.TestingGarbleCheck.empty())
    garbleEdits(Merged, Options.TestingGarbleCheck);
  if (const int Code = renderFiles(Merged, Err))
    return Code;
  reportWarnings(Merged, Err);
  if (!Options.TestingNoVerify &&
      !verifyMerged(Database, Inputs, Failed, Merged, Extra, Cache, Err)) {
    // A diff is still shown for review; nothing is written.
    if (Options.Mode == OutputMode::Diff)
      emitResults(Merged, Inputs, Options, ExitParseError, Out, Err);
    return fail(Err, ExitParseError,
                "the migrated program would not compile (errors above), which is accel-migrate's "
                "fault, not the program's; no file was changed");
  }
  int Exit = Failed.empty() ? ExitSuccess : ExitParseError;
  Exit = emitResults(Merged, Inputs, Options, Exit, Out, Err);
  if (Exit == ExitFileError)
    return Exit;
  return summarize(Merged, Failed, Options, Exit, Err);
}

} // namespace accel::migrate
