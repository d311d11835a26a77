//===- LoaderTypeCheck.h - accel-migrate 'loader-type' ----------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

#include <set>

namespace accel::migrate {

/// A written-out `torch::data::StatelessDataLoader<Dataset, Sampler>` (a function's parameter, a
/// type alias, a variable) names `accel::DataLoader<Dataset, Sampler>` once the program's loaders
/// are prepared: prepare_data_loader returns that type for the same arguments, and a function
/// taking the loader by its type would otherwise not accept the prepared one.
class LoaderTypeCheck : public MigrationCheck {
public:
  explicit LoaderTypeCheck(MigrationContext &Context) : MigrationCheck("loader-type", Context) {}
  void registerMatchers(clang::ast_matchers::MatchFinder &Finder) override;
  void check(const clang::ast_matchers::MatchFinder::MatchResult &Result) override;

private:
  std::set<unsigned> Seen; // raw locations of the template names rewritten (templates repeat them)
};

} // namespace accel::migrate
