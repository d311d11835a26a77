//===- CompileArgs.h - How to compile a LibTorch file when nobody says --------------*- C++ -*-===//
#pragma once

#include <string>
#include <vector>

namespace accel::migrate {

/// Include directories of LibTorch, found from (in order) $Torch_DIR, $CMAKE_PREFIX_PATH,
/// $LIBTORCH, the LibTorch this tool was built against, /usr/local and /usr. Each returned
/// directory contains torch/torch.h or torch/csrc/api/include/torch/torch.h.
std::vector<std::string> torchIncludeDirs();

/// The -std flag LibTorch's headers in `IncludeDirs` need: -std=c++20 from LibTorch 2.14 (whose
/// headers refuse older standards), else -std=c++17. A compile database's own -std wins over it.
std::string torchCxxStandard(const std::vector<std::string> &IncludeDirs);

/// Arguments for a plain one-file program that includes <torch/torch.h>: the -std LibTorch needs
/// (see torchCxxStandard) plus LibTorch's
/// and libaccel's include directories as system directories (so they are never edited).
std::vector<std::string> defaultCompileArgs();

/// What defaultCompileArgs() adds to the user's own command line (the flags after `--`): the
/// standard only when the command line names none (`-std=`, `--std=`, `/std:`), LibTorch's
/// include directories only when it names none of its own. The user's flags decide; this fills in.
std::vector<std::string> completingArgs(const std::vector<std::string> &CommandLine);

/// Arguments every run adds: clang's resource directory (so <stddef.h> and friends are found),
/// no warnings (the program's own warnings are not ours to report) and accel's own headers.
std::vector<std::string> toolArgs();

} // namespace accel::migrate
