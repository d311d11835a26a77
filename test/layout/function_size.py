#!/usr/bin/env python3
"""layout.function_size: no function in runtime/src, launcher/lib or rewriter/lib (their sources
and headers) is longer than 80 lines, as clang-tidy's readability-function-size counts them
(LineThreshold 80). A recursive walk is a visitor class (clang's RecursiveASTVisitor or
StmtVisitor), not one long function with a recursive lambda inside.

The runtime's sources are read through one precompiled <torch/torch.h> built by clang for the
runtime library's flags (CMake's own precompiled header is GCC's, which clang cannot read). Still,
clang-tidy walks LibTorch's whole AST for each file (about 7 s of CPU a file). A function's size
depends on its own file's text, so a source whose text, the text of our headers it includes and
this check's settings clang-tidy has passed before is not read again, as clang-tidy-diff reads
only what a change touched. The verdicts are kept by content hash in two places:

- test/layout/function_size.passed, in the tree: the files that passed when it was last recorded
  (`--record`, run before a commit that changes sources of these folders). A fresh clone reads
  only the files changed since; a change to this script (the check and its settings are in it)
  changes every key, so the whole tree is read again.
- ~/.cache/accel/function-size, as ccache keeps objects: what passed on this machine since. Like
  ccache it is off with CCACHE_DISABLE set.

    function_size.py BUILD_DIR SOURCE_DIR            read what no verdict covers
    function_size.py --all BUILD_DIR SOURCE_DIR      read every file (scripts/test.sh --full)
    function_size.py --record BUILD_DIR SOURCE_DIR   read what no verdict covers, then write every
                                                     passing file's key to function_size.passed
"""
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

LINE_THRESHOLD = 80
FOLDERS = ("runtime/src/", "launcher/lib/", "rewriter/lib/")
CONFIG = ("{Checks: '-*,readability-function-size', WarningsAsErrors: '', CheckOptions: "
          f"[{{key: readability-function-size.LineThreshold, value: {LINE_THRESHOLD}}}]}}")


def tool(name):
    for candidate in (name, f"{name}-14"):
        if subprocess.run(["which", candidate], capture_output=True).returncode == 0:
            return candidate
    sys.exit(f"function_size: {name} is not installed (scripts/install-deps.sh installs it)")


UNITY_INCLUDE = re.compile(r'^#include\s+"([^"]+)"', re.M)


def sources_of(entry):
    """The files a compile command compiles: its own; or in a unity build (ACCEL_UNITY_BUILD), whose
    commands compile batches, the sources its batch includes, each then read alone here."""
    file = entry["file"]
    if os.path.basename(os.path.dirname(file)) == "Unity":
        return UNITY_INCLUDE.findall(open(file).read())
    return [file]


def entries(build, source):
    """The compile commands of our files, as argument lists without CMake's GCC PCH, each with
    the PCH's header it leaves out (its sources rely on it for <torch/torch.h>) or None."""
    selected = []
    for entry in json.load(open(os.path.join(build, "compile_commands.json"))):
        for file in sources_of(entry):
            path = os.path.relpath(file, source)
            if path.startswith(FOLDERS) and path.endswith(".cpp"):
                selected.append(entry_for(entry, path, file))
    return selected


def entry_for(entry, path, file):
    """`entry`'s command for `file` alone (the same as its batch's, under a unity build)."""
    args = [file if arg == entry["file"] else arg for arg in shlex.split(entry["command"])]
    cleaned, skip, pch = [], False, None
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "-include" and "cmake_pch" in args[i + 1]:
            skip = True
            pch = args[i + 1]
            continue
        if arg in ("-Winvalid-pch",):
            continue
        cleaned.append(arg)
    return path, entry["directory"], cleaned, pch


def flags_of(args, file):
    """The flags that decide how headers parse: -D, -I, -isystem, -std, -f, -O."""
    out, i = [], 1
    while i < len(args):
        arg = args[i]
        if arg in ("-o", "-MF", "-MT", "-c"):
            i += 2 if arg != "-c" else 1
            continue
        if arg == "-MD" or arg == file or arg.startswith("-W"):
            i += 1
            continue
        if arg in ("-isystem", "-I", "-include"):
            out += [arg, args[i + 1]]
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def cache_dir():
    if os.environ.get("CCACHE_DISABLE"):
        return None
    root = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    path = os.path.join(root, "accel", "function-size")
    os.makedirs(path, exist_ok=True)
    return path


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def our_headers(file, source):
    """The headers of runtime/src and launcher/lib that `file` includes, directly or through
    each other (found beside the includer or from either folder's root, as the builds find them)."""
    roots = [os.path.join(source, folder) for folder in FOLDERS]
    found, pending = set(), [file]
    while pending:
        current = pending.pop()
        for name in INCLUDE.findall(open(current, errors="replace").read()):
            for base in [os.path.dirname(current)] + roots:
                candidate = os.path.normpath(os.path.join(base, name))
                if os.path.isfile(candidate):
                    if candidate not in found and candidate.startswith(tuple(roots)):
                        found.add(candidate)
                        pending.append(candidate)
                    break
    return sorted(found)


PASSED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "function_size.passed")


def verdict_key(file, source):
    """A verdict holds while the file, our headers it includes (their functions are counted
    too) and this check (its settings and code) are unchanged. Paths count relative to the
    source tree, so a verdict holds in any checkout."""
    digest = hashlib.sha256(CONFIG.encode())
    with open(os.path.abspath(__file__), "rb") as script:
        digest.update(script.read())
    for path in [file] + our_headers(file, source):
        digest.update(os.path.relpath(path, source).encode())
        with open(path, "rb") as text:
            digest.update(text.read())
    return digest.hexdigest()


def text_copy_of(cmake_pch, directory, work):
    """A copy of CMake's PCH header (the includes it lists) where no .gch sits beside it."""
    original = os.path.join(directory, cmake_pch)
    copy = os.path.join(work, "pch-" + hashlib.sha256(original.encode()).hexdigest()[:12] + ".h")
    if not os.path.exists(copy):
        with open(original) as text, open(copy, "w") as out:
            out.write(text.read())
    return copy


def recorded_keys():
    """The keys function_size.passed lists (a line: KEY PATH)."""
    if not os.path.exists(PASSED):
        return set()
    with open(PASSED) as text:
        return {line.split()[0] for line in text if line.strip() and not line.startswith("#")}


def record(keys, source):
    """Writes function_size.passed: each file that passed, by key, whole or not at all."""
    lines = sorted(f"{key} {os.path.relpath(file, source)}\n" for file, key in keys.items())
    temporary = PASSED + ".tmp"
    with open(temporary, "w") as out:
        out.write("# layout.function_size's verdicts (test/layout/function_size.py --record):"
                  " files that passed, by content\n")
        out.writelines(lines)
    os.replace(temporary, PASSED)


def main():
    args = sys.argv[1:]
    mode = args.pop(0) if args and args[0] in ("--all", "--record") else None
    if len(args) != 2:
        sys.exit(__doc__)
    # The PCH alone is 120 MB: the folder goes when the check ends, whatever its verdict.
    with tempfile.TemporaryDirectory(prefix="accel-function-size-") as work:
        return check_files(os.path.abspath(args[0]), os.path.abspath(args[1]), work, mode)


def check_files(build, source, work, mode):
    clang, tidy = tool("clang++"), tool("clang-tidy")
    selected = entries(build, source)
    if not selected:
        sys.exit(f"function_size: {build}/compile_commands.json compiles no source of "
                 f"{', '.join(FOLDERS)}")
    # Files passed before, by content: not read again.
    cache = cache_dir()
    # Each key once, from the text clang-tidy is about to read.
    keys = {os.path.join(source, e[0]): verdict_key(os.path.join(source, e[0]), source)
            for e in selected}
    known = set() if mode == "--all" else recorded_keys()

    def passed_before(key):
        return key in known or (cache is not None and mode != "--all" and
                                os.path.exists(os.path.join(cache, key)))

    unread = [e for e in selected if not passed_before(keys[os.path.join(source, e[0])])]
    passed = len(selected) - len(unread)
    selected = unread
    # One clang PCH for the runtime library's own flags; the files CMake's PCH served with other
    # flags include <torch/torch.h> as that PCH did, and parse it.
    runtime = [e for e in selected if e[3] and "/accel.dir/" in e[3]]
    pch_flags = flags_of(runtime[0][2], runtime[0][2][-1]) if runtime else None
    header = os.path.join(work, "torch_pch.h")
    pch = header + ".pch"
    with open(header, "w") as out:
        out.write("#include <torch/torch.h>\n")
    if pch_flags is not None:
        built = subprocess.run([clang] + pch_flags + ["-x", "c++-header", header, "-o", pch],
                               capture_output=True, text=True, cwd=runtime[0][1])
        if built.returncode != 0:
            print(built.stderr[-2000:])
            pch_flags = None
    database = []
    for path, directory, args, cmake_pch in selected:
        extra = []
        if cmake_pch and pch_flags is not None and flags_of(args, args[-1]) == pch_flags:
            extra = ["-include-pch", pch]
        elif cmake_pch and "/accel_migrate.dir/" in cmake_pch:
            # accel-migrate's PCH holds clang's headers, not LibTorch's: its text, without GCC's
            # precompiled form beside it.
            extra = ["-include", text_copy_of(cmake_pch, directory, work)]
        elif cmake_pch:
            extra = ["-include", "torch/torch.h"]
        database.append({"directory": directory, "file": os.path.join(source, path),
                         "arguments": args[:1] + extra + args[1:]})
    with open(os.path.join(work, "compile_commands.json"), "w") as out:
        json.dump(database, out)

    # Functions defined in our headers count as well (each reported once, by its first includer).
    header_filter = f"^{re.escape(source)}/({'|'.join(f.rstrip('/') for f in FOLDERS)})/"

    def check(item):
        result = subprocess.run([tidy, "-p", work, f"--config={CONFIG}", "--quiet",
                                 f"--header-filter={header_filter}", item["file"]],
                                capture_output=True, text=True)
        found = [line for line in result.stdout.splitlines()
                 if "readability-function-size" in line and "warning:" in line]
        errors = [line for line in result.stdout.splitlines() if " error: " in line]
        return item["file"], found, errors

    jobs = max(1, len(os.sched_getaffinity(0)))
    problems, reported, failed = 0, set(), set()
    with ThreadPoolExecutor(jobs) as pool:
        for file, found, errors in pool.map(check, database):
            if found or errors:
                failed.add(file)
            elif cache is not None:
                open(os.path.join(cache, keys[file]), "w").close()
            for line in found + errors:
                if line in reported:
                    continue
                reported.add(line)
                print(os.path.relpath(line, source) if line.startswith(source) else line)
                problems += 1
    print(f"function_size: {len(database)} files of {', '.join(FOLDERS)} read by clang-tidy, "
          f"{passed} unchanged since they passed; {problems} functions over {LINE_THRESHOLD} "
          "lines or files clang-tidy could not read")
    if mode == "--record":
        record({file: key for file, key in keys.items() if file not in failed}, source)
        print(f"function_size: {len(keys) - len(failed)} verdicts written to {PASSED}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
