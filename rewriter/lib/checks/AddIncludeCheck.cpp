//===- AddIncludeCheck.cpp ------------------------------------------------------------------===//
#include "AddIncludeCheck.h"

#include <algorithm>

namespace accel::migrate {

void AddIncludeCheck::finish() {
  for (const std::string &Path : Context.editedFiles()) {
    const FileResult *File = Context.resultFor(Path);
    const bool UsesAccel =
        std::any_of(File->Edits.edits().begin(), File->Edits.edits().end(), [](const Edit &E) {
          return E.Text.find("accelerator") != std::string::npos ||
                 E.Text.find("accel::") != std::string::npos;
        });
    if (!UsesAccel)
      continue;
    const auto &Includes = Context.includesOf(Path);
    if (std::any_of(Includes.begin(), Includes.end(),
                    [](const IncludeDirective &I) { return I.Spelled == "accel/accel.h"; }))
      continue;
    // Next to the torch include; else after the last include; else at the top.
    const IncludeDirective *Anchor = nullptr;
    for (const IncludeDirective &I : Includes)
      if (llvm::StringRef(I.Spelled).startswith("torch/")) {
        Anchor = &I;
        break;
      }
    if (!Anchor && !Includes.empty())
      Anchor = &Includes.back();
    if (Anchor) {
      Context.insert(Name, Anchor->LineEnd, "\n#include <accel/accel.h>");
      Context.applied(Name, Anchor->LineEnd);
    }
    // A file with no #include at all gets its LibTorch through another file; nothing to do.
  }
}

} // namespace accel::migrate
