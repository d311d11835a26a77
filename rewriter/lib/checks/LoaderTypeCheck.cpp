//===- LoaderTypeCheck.cpp ------------------------------------------------------------------===//
#include "LoaderTypeCheck.h"

#include "clang/AST/TypeLoc.h"
#include "clang/Basic/SourceManager.h"

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

namespace {

// How `StatelessDataLoader` is qualified where it is written: the length of a `torch::data::`,
// `::torch::data::` or `data::` right before it (0 when it is named through a using-directive).
size_t qualifierLength(llvm::StringRef Before) {
  Before = Before.rtrim();
  for (llvm::StringRef Qualifier : {"::torch::data::", "torch::data::", "data::"})
    if (Before.endswith(Qualifier))
      return Qualifier.size();
  return 0;
}

} // namespace

void LoaderTypeCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(typeLoc(loc(templateSpecializationType())).bind("type"), this);
}

void LoaderTypeCheck::check(const MatchFinder::MatchResult &Result) {
  const auto Loc = Result.Nodes.getNodeAs<TypeLoc>("type")->getAs<TemplateSpecializationTypeLoc>();
  if (!Loc)
    return;
  // Every template type of every header matches: the cheap tests (the program's own files, the
  // template's short name) go first.
  const SourceLocation NameLoc = Loc.getTemplateNameLoc();
  if (NameLoc.isMacroID() || !Context.isEditable(NameLoc))
    return;
  const TemplateDecl *Template = Loc.getTypePtr()->getTemplateName().getAsTemplateDecl();
  if (!Template || Template->getName() != "StatelessDataLoader" ||
      Template->getQualifiedNameAsString() != "torch::data::StatelessDataLoader" ||
      (Context.facts().loaders().empty() && Context.facts().returnedLoaders().empty()) ||
      !Seen.insert(NameLoc.getRawEncoding()).second)
    return;
  const SourceManager &SM = Context.sourceManager();
  const auto [FID, Offset] = SM.getDecomposedLoc(NameLoc);
  const llvm::StringRef Buffer = SM.getBufferData(FID);
  const llvm::StringRef Before = Buffer.substr(0, Offset);
  const size_t Trimmed = Before.size() - Before.rtrim().size();
  const size_t Qualifier = qualifierLength(Before);
  const SourceLocation Begin =
      NameLoc.getLocWithOffset(-static_cast<int>(Qualifier + (Qualifier ? Trimmed : 0)));
  const SourceRange Written(Begin, NameLoc);
  if (!Context.canEdit(Name, Written))
    return;
  Context.replace(Name, Written, "accel::DataLoader");
  Context.applied(Name, NameLoc);
}

} // namespace accel::migrate
