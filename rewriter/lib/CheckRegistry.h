//===- CheckRegistry.h - The table of transformations -------------------------------*- C++ -*-===//
#pragma once

#include "MigrationCheck.h"

#include <memory>
#include <vector>

namespace accel::migrate {

struct CheckInfo {
  const char *Name;
  const char *Description;
  std::unique_ptr<MigrationCheck> (*Create)(MigrationContext &);
};

/// Every transformation, in the order their end-of-file steps run (the support transformations
/// create-accelerator and add-include last, because they serve the others).
const std::vector<CheckInfo> &checkRegistry();

/// True when Name is in the registry.
bool isKnownCheck(llvm::StringRef Name);

} // namespace accel::migrate
