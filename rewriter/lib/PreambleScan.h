//===- PreambleScan.h - Which library headers a file opens with -------------------*- C++ -*-===//
//
// A file can use the cached preamble when parsing the preamble first means the same as parsing
// the file as written: the library headers (LibTorch's, accel's) are the first thing it reaches,
// through its own leading #include lines and the leading lines of the project headers those
// name, with nothing before them that could change how they read (a #define, an #if, an -include
// on the command line). This scan reads the text only; it does not run the preprocessor.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace accel::migrate {

/// The library headers (as spelled, `<torch/torch.h>`) that MainFile reaches first, in the
/// order reached, without repeats. Empty when the file cannot use a preamble: a directive other
/// than #include, #pragma once or an include guard comes first, a project header it opens with
/// cannot be found, or the compile command forces includes of its own. CommandLine is the
/// compile command (its include directories resolve the project's headers), run in Directory.
std::vector<std::string> leadingLibraryIncludes(const std::string &MainFile,
                                                const std::vector<std::string> &CommandLine,
                                                const std::string &Directory);

/// CommandLine with its include directories (-I, -iquote, -isystem, -idirafter) made absolute
/// against Directory: a preamble then depends on where the headers are, not on where the command
/// runs, and projects in different directories with the same flags share it.
std::vector<std::string> withAbsoluteIncludeDirectories(std::vector<std::string> CommandLine,
                                                        const std::string &Directory);

} // namespace accel::migrate
