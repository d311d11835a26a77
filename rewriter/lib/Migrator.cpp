//===- Migrator.cpp -------------------------------------------------------------------------===//
#include "Migrator.h"

#include "CompileArgs.h"
#include "FileIO.h"
#include "MigrationAction.h"
#include "MigrationResult.h"
#include "SourceStyle.h"
#include "UnifiedDiff.h"

#include "clang/Basic/FileManager.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ThreadPool.h"

#include <map>
#include <mutex>

using namespace clang;

namespace accel::migrate {

namespace {

std::string absolutePath(llvm::StringRef Path) {
  llvm::SmallString<256> Abs(Path);
  llvm::sys::fs::make_absolute(Abs);
  llvm::sys::path::remove_dots(Abs, true);
  llvm::SmallString<256> Real;
  if (!llvm::sys::fs::real_path(Abs, Real))
    return std::string(Real);
  return std::string(Abs);
}

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
};

} // namespace

int runMigration(const tooling::CompilationDatabase &Database,
                 const std::vector<std::string> &Files, const MigratorOptions &Options,
                 llvm::raw_ostream &Out, llvm::raw_ostream &Err) {
  // Every input must be readable before anything runs.
  std::vector<std::string> Inputs;
  for (const std::string &File : Files) {
    auto Content = readFile(File);
    if (!Content) {
      Err << "accel-migrate: error: " << llvm::toString(Content.takeError()) << "\n";
      return ExitFileError;
    }
    Inputs.push_back(absolutePath(File));
  }
  if (Options.Mode == OutputMode::OutputFile && Inputs.size() != 1) {
    Err << "accel-migrate: error: -o takes exactly one input file\n";
    return ExitUsageError;
  }

  // Parse and run the checks, several files at a time.
  std::vector<TranslationUnitResult> Results(Inputs.size());
  MigrateOptions Checks = Options.Checks;
  if (Checks.WorkingDirectory.empty()) {
    llvm::SmallString<256> Current, Real;
    if (!llvm::sys::fs::current_path(Current) && !llvm::sys::fs::real_path(Current, Real) &&
        Real != "/")
      Checks.WorkingDirectory = Real.str().str();
  }
  {
    llvm::ThreadPool Pool(llvm::hardware_concurrency(std::max(1u, Options.Jobs)));
    std::mutex ErrLock;
    for (size_t I = 0; I < Inputs.size(); ++I)
      Pool.async([&, I] {
        tooling::ClangTool Tool(Database, {Inputs[I]});
        std::vector<std::string> Extra = toolArgs();
        Extra.insert(Extra.end(), Options.ExtraArgs.begin(), Options.ExtraArgs.end());
        Tool.appendArgumentsAdjuster(
            tooling::getInsertArgumentAdjuster(Extra, tooling::ArgumentInsertPosition::END));
        const auto Factory = newMigrationActionFactory(Checks, Results[I]);
        if (Tool.run(Factory.get()) != 0)
          Results[I].Failed = true;
      });
    Pool.wait();
  }

  // Merge: a header seen by several files is edited once.
  std::map<std::string, MergedFile> Merged;
  std::vector<std::string> Failed;
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
  // A header edited from a file that failed to compile would be half migrated: no edits then.
  for (const std::string &Path : Failed)
    Merged.erase(Path);

  int Exit = Failed.empty() ? ExitSuccess : ExitParseError;
  for (const std::string &Path : Failed)
    Err << "accel-migrate: error: " << displayPath(Path)
        << " does not compile (errors above); it was left untouched\n";

  // Produce each file's migrated text.
  for (auto &[Path, File] : Merged) {
    auto Content = readFile(Path);
    if (!Content) {
      Err << "accel-migrate: error: " << llvm::toString(Content.takeError()) << "\n";
      return ExitFileError;
    }
    File.Original = *Content;
    std::vector<std::pair<unsigned, unsigned>> Inserted, Rewritten;
    File.Migrated = File.Result.Edits.apply(File.Original, &Inserted, &Rewritten);
    File.Migrated = restoreWhitespaceOnlyChanges(
        File.Original, formatInserted(Path, File.Original, File.Migrated, Inserted, Rewritten));
  }

  // Warnings, in file and line order.
  std::set<Warning> AllWarnings;
  for (const auto &[Path, File] : Merged)
    AllWarnings.insert(File.Result.Warnings.begin(), File.Result.Warnings.end());
  for (const Warning &W : AllWarnings)
    Err << displayPath(W.File) << ":" << W.Line << ":" << W.Column << ": warning: " << W.Message
        << " [accel-migrate-" << W.Check << "]\n";

  bool AnyChange = false;
  for (const auto &[Path, File] : Merged)
    AnyChange = AnyChange || File.Migrated != File.Original;

  switch (Options.Mode) {
  case OutputMode::Diff:
    for (const auto &[Path, File] : Merged) {
      const std::string Shown = displayPath(Path);
      Out << unifiedDiff("a/" + Shown, "b/" + Shown, File.Original, File.Migrated);
    }
    break;
  case OutputMode::Check:
    for (const auto &[Path, File] : Merged)
      if (File.Migrated != File.Original)
        Err << "accel-migrate: " << displayPath(Path) << " would be migrated\n";
    if (AnyChange && Exit == ExitSuccess)
      Exit = ExitWouldChange;
    break;
  case OutputMode::OutputFile: {
    if (Merged.count(Inputs[0]) == 0)
      break; // failed to compile: nothing written
    for (const auto &[Path, File] : Merged)
      if (Path != Inputs[0] && File.Migrated != File.Original)
        Err << "accel-migrate: warning: " << displayPath(Path)
            << " would also change, but -o writes only the input file\n";
    if (llvm::Error E = checkWritable(Options.OutputFile)) {
      Err << "accel-migrate: error: " << llvm::toString(std::move(E)) << "\n";
      return ExitFileError;
    }
    if (llvm::Error E = writeFileAtomically(Options.OutputFile, Merged[Inputs[0]].Migrated)) {
      Err << "accel-migrate: error: " << llvm::toString(std::move(E)) << "\n";
      return ExitFileError;
    }
    break;
  }
  case OutputMode::InPlace: {
    // All or nothing: every file to change must be writable before the first is written.
    for (const auto &[Path, File] : Merged)
      if (File.Migrated != File.Original)
        if (llvm::Error E = checkWritable(Path)) {
          Err << "accel-migrate: error: " << llvm::toString(std::move(E))
              << "; no file was changed\n";
          return ExitFileError;
        }
    for (const auto &[Path, File] : Merged)
      if (File.Migrated != File.Original)
        if (llvm::Error E = writeFileAtomically(Path, File.Migrated)) {
          Err << "accel-migrate: error: " << llvm::toString(std::move(E)) << "\n";
          return ExitFileError;
        }
    break;
  }
  }

  // Summary, and the same as JSON for machines.
  llvm::json::Array JsonFiles;
  for (const auto &[Path, File] : Merged) {
    const auto Counts = File.Result.appliedByCheck();
    unsigned Total = 0;
    std::string Parts;
    llvm::json::Object JsonCounts;
    for (const auto &[Check, N] : Counts) {
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
        {"changed", File.Migrated != File.Original}});
  }
  llvm::json::Array JsonFailed;
  for (const std::string &Path : Failed)
    JsonFailed.push_back(Path);
  if (!Options.StatsJson.empty()) {
    const llvm::json::Value Stats = llvm::json::Object{
        {"files", std::move(JsonFiles)}, {"failed", std::move(JsonFailed)}, {"exit_code", Exit}};
    std::string Text;
    llvm::raw_string_ostream OS(Text);
    OS << llvm::formatv("{0:2}", Stats) << "\n";
    OS.flush();
    if (llvm::Error E = writeFileAtomically(Options.StatsJson, Text)) {
      Err << "accel-migrate: error: " << llvm::toString(std::move(E)) << "\n";
      return ExitFileError;
    }
  }
  return Exit;
}

} // namespace accel::migrate
