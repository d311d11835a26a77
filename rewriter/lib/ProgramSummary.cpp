//===- ProgramSummary.cpp -------------------------------------------------------------------===//
#include "ProgramSummary.h"

#include "clang/AST/Decl.h"
#include "clang/Index/USRGeneration.h"
#include "llvm/ADT/SmallString.h"

namespace accel::migrate {

void ProgramSummary::merge(const ProgramSummary &Other) {
  DefinesMain = DefinesMain || Other.DefinesMain;
  BindsAccelerator = BindsAccelerator || Other.BindsAccelerator;
  TrainedModelParameters.insert(Other.TrainedModelParameters.begin(),
                                Other.TrainedModelParameters.end());
  Called.insert(Other.Called.begin(), Other.Called.end());
  Collectives.insert(Other.Collectives.begin(), Other.Collectives.end());
  Saves = Saves || Other.Saves;
  LoaderFactories.insert(Other.LoaderFactories.begin(), Other.LoaderFactories.end());
}

ProgramSummary ProgramSummary::relevantTo(const ProgramSummary &Own, const ProgramSummary &Others) {
  ProgramSummary Relevant;
  // Another file's main decides where the Accelerator is created, unless this file has main.
  Relevant.DefinesMain = Others.DefinesMain && !Own.DefinesMain;
  // Code elsewhere asks for the process's Accelerator: this file's main creates it.
  Relevant.BindsAccelerator = Others.BindsAccelerator && Own.DefinesMain;
  // A save elsewhere: this file's loads wait for it.
  Relevant.Saves = Others.Saves;
  // Functions this file calls: it prepares the models it passes them to train.
  for (const auto &[Usr, Reached] : Others.Collectives)
    if (Own.called(Usr))
      Relevant.Collectives.emplace(Usr, Reached);
  for (const auto &Parameter : Others.TrainedModelParameters)
    if (Own.called(Parameter.first))
      Relevant.TrainedModelParameters.insert(Parameter);
  // Loaders this file gets from functions elsewhere that prepare them.
  for (const std::string &Usr : Others.LoaderFactories)
    if (Own.called(Usr))
      Relevant.LoaderFactories.insert(Usr);
  // Calls elsewhere to functions that train here: their callers prepare the model.
  for (const auto &Parameter : Own.TrainedModelParameters)
    if (Others.called(Parameter.first))
      Relevant.Called.insert(Parameter.first);
  return Relevant;
}

std::string usrOf(const clang::Decl *D) {
  llvm::SmallString<128> Usr;
  if (!D || clang::index::generateUSRForDecl(D, Usr))
    return {};
  return std::string(Usr);
}

} // namespace accel::migrate
