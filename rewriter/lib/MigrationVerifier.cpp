//===- MigrationVerifier.cpp ----------------------------------------------------------------===//
#include "MigrationVerifier.h"

#include "FileIO.h"
#include "LineDiff.h"
#include "MigrationAction.h"

#include "clang/Basic/Diagnostic.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Tooling/ArgumentsAdjusters.h"
#include "clang/Tooling/Tooling.h"

#include <set>
#include <tuple>

using namespace clang;

namespace accel::migrate {

namespace {

/// Keeps the errors of a parse, each with where it stands (its expansion, for a macro).
class ErrorCollector : public DiagnosticConsumer {
public:
  void HandleDiagnostic(DiagnosticsEngine::Level Level, const Diagnostic &Info) override {
    DiagnosticConsumer::HandleDiagnostic(Level, Info);
    if (Level < DiagnosticsEngine::Error)
      return;
    MigratedError E;
    llvm::SmallString<256> Text;
    Info.FormatDiagnostic(Text);
    E.Message = std::string(Text);
    if (Info.hasSourceManager() && Info.getLocation().isValid()) {
      const SourceManager &SM = Info.getSourceManager();
      const PresumedLoc Where = SM.getPresumedLoc(SM.getExpansionLoc(Info.getLocation()));
      if (Where.isValid()) {
        E.File = absolutePath(Where.getFilename());
        E.Line = Where.getLine();
        E.Column = Where.getColumn();
      }
    }
    Errors.push_back(std::move(E));
  }
  std::vector<MigratedError> Errors;
};

std::vector<MigratedError> parseWith(const tooling::CompilationDatabase &Database,
                                     const std::string &Input,
                                     const std::map<std::string, MigratedText> &Files,
                                     std::vector<std::string> Args, const std::string &Pch) {
  tooling::ClangTool Tool(Database, {Input});
  Tool.setPrintErrorMessage(false);         // the errors are reported with their origins instead
  Args.push_back("-fno-caret-diagnostics"); // no "N errors generated."
  if (!Pch.empty())
    Args.insert(Args.end(), {"-include-pch", Pch});
  Tool.appendArgumentsAdjuster(
      tooling::getInsertArgumentAdjuster(Args, tooling::ArgumentInsertPosition::END));
  for (const auto &[Path, Text] : Files)
    if (Text.Migrated != Text.Original)
      Tool.mapVirtualFile(Path, Text.Migrated);
  ErrorCollector Collector;
  Tool.setDiagnosticConsumer(&Collector);
  const int Status = Tool.run(newVerificationActionFactory().get());
  if (Status != 0 && Collector.Errors.empty()) {
    MigratedError E;
    E.Message = "the migrated " + Input + " could not be parsed again";
    Collector.Errors.push_back(E);
  }
  return std::move(Collector.Errors);
}

/// The transformations whose edits start inside [Begin, End] of the original.
std::vector<std::string> checksIn(const EditSet &Edits, unsigned Begin, unsigned End) {
  std::set<std::string> Names;
  for (const Edit &E : Edits.edits())
    if (E.Offset >= Begin && E.Offset <= End)
      Names.insert(E.Check);
  return {Names.begin(), Names.end()};
}

} // namespace

std::vector<LineOrigin> lineOrigins(llvm::StringRef Original, llvm::StringRef Migrated) {
  const std::vector<llvm::StringRef> A = splitLines(Original), B = splitLines(Migrated);
  const std::vector<LineOp> Ops = diffLines(A, B);
  std::vector<unsigned> Starts(A.size() + 1, 0);
  for (size_t I = 0; I < A.size(); ++I)
    Starts[I + 1] = Starts[I] + static_cast<unsigned>(A[I].size());
  std::vector<LineOrigin> Origins;
  size_t Line = 0; // the original's, 0-based
  for (size_t K = 0; K < Ops.size();) {
    if (Ops[K] == LineOp::Keep) {
      Origins.push_back({static_cast<unsigned>(Line + 1), false, Starts[Line], Starts[Line + 1]});
      ++Line;
      ++K;
      continue;
    }
    // A change: the original lines it removes, and the lines it writes in their place. An edit
    // that inserts lines may sit at the end of the line before (after a statement).
    size_t End = K, Removed = 0;
    for (; End < Ops.size() && Ops[End] != LineOp::Keep; ++End)
      Removed += Ops[End] == LineOp::Remove;
    const unsigned Begin = Starts[Line == 0 ? 0 : Line - 1];
    const unsigned Stop = Starts[std::min(Line + Removed, A.size())];
    for (size_t J = K; J < End; ++J)
      if (Ops[J] == LineOp::Add)
        Origins.push_back({static_cast<unsigned>(Line + 1), true, Begin, Stop});
    Line += Removed;
    K = End;
  }
  return Origins;
}

std::vector<MigratedError> verifyMigration(
    const tooling::CompilationDatabase &Database, const std::vector<std::string> &Inputs,
    const std::map<std::string, MigratedText> &Files, const std::vector<std::string> &Args,
    const std::function<std::string(const std::string &)> &PchFor) {
  std::map<std::string, std::vector<LineOrigin>> Origins;
  for (const auto &[Path, Text] : Files)
    if (Text.Migrated != Text.Original)
      Origins[Path] = lineOrigins(Text.Original, Text.Migrated);
  std::set<std::tuple<std::string, unsigned, unsigned, std::string>> Seen;
  std::vector<MigratedError> All;
  for (const std::string &Input : Inputs) {
    const std::string Pch = PchFor ? PchFor(Input) : std::string();
    std::vector<MigratedError> Errors = parseWith(Database, Input, Files, Args, Pch);
    if (!Errors.empty() && !Pch.empty()) // the preamble's fault, or the program's: parse whole
      Errors = parseWith(Database, Input, Files, Args, "");
    for (MigratedError &E : Errors) {
      if (!Seen.insert({E.File, E.Line, E.Column, E.Message}).second)
        continue;
      const auto Found = Origins.find(E.File);
      if (Found != Origins.end() && E.Line >= 1 && E.Line <= Found->second.size()) {
        const LineOrigin &Origin = Found->second[E.Line - 1];
        E.OriginalLine = Origin.OriginalLine;
        E.OnChangedLine = Origin.Changed;
        if (Origin.Changed)
          E.Checks = checksIn(*Files.at(E.File).Edits, Origin.Begin, Origin.End);
      }
      All.push_back(std::move(E));
    }
  }
  return All;
}

} // namespace accel::migrate
