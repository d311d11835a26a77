#!/usr/bin/env python3
"""docs.check: README.md, docs/ and bench/README.md read as a user would, so that they stay true.

- Every C++ block is built against the installed package. The comment line before the fence says
  how: `<!-- cpp: program NAME -->` is a whole program, built and linked as NAME;
  `<!-- cpp: in CONTEXT -->` is the body of main() in test/docs/contexts/CONTEXT.cpp, which
  declares what the block uses. A C++ block without one fails.
- Every shell block says whether it runs: `<!-- sh: run -->` blocks run, in order, each with
  `set -e` in a folder holding the programs built above, with the installed `accel` and
  `accel-migrate` first on PATH, and a program of the user's to migrate: src/train.cpp (a copy of
  examples/classifier/train.cpp) with build/compile_commands.json for it. `<!-- sh: not run: WHY
  -->` blocks do not. A shell block without one fails.
- Every relative link points at a file that exists, and every #anchor at one of its headings.
- docs/environment.md's table holds exactly the ACCEL_* variables of common's contract.h.

    check_docs.py --source SRC --build BUILD [--prefix-path TORCH] [--work DIR]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*(cpp|sh):\s*(.*?)\s*-->\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
VARIABLE = re.compile(r'"(ACCEL_[A-Z0-9_]+)"')
TABLE_VARIABLE = re.compile(r"^\|\s*`(ACCEL_[A-Z0-9_]+)`\s*\|")


class Block:
    def __init__(self, path, line, language, text, marker):
        self.path, self.line, self.language, self.text, self.marker = (
            path, line, language, text, marker)

    def where(self):
        return f"{self.path}:{self.line}"


def documents(source):
    found = [os.path.join(source, "README.md"), os.path.join(source, "bench", "README.md")]
    for folder, _, files in os.walk(os.path.join(source, "docs")):
        found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".md")]
    return found


def read_blocks(path, source):
    """The fenced blocks of a Markdown file, each with the marker comment just before it."""
    blocks, lines = [], open(path, encoding="utf-8").read().split("\n")
    relative = os.path.relpath(path, source)
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start, language = i, fence.group(1)
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        previous = start - 1
        while previous >= 0 and not lines[previous].strip():
            previous -= 1
        marker = MARKER.match(lines[previous]) if previous >= 0 else None
        blocks.append(Block(relative, start + 1, language, "\n".join(body) + "\n",
                            (marker.group(1), marker.group(2)) if marker else None))
        i += 1
    return blocks


def slug(heading):
    """GitHub's anchor for a heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    found, in_fence = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def check_links(paths, source):
    problems = []
    for path in paths:
        in_fence = False
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            if line.startswith("```"):
                in_fence = not in_fence
            if in_fence:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                resolved = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                            if file_part else path)
                where = f"{os.path.relpath(path, source)}:{number}"
                if not os.path.exists(resolved):
                    problems.append(f"{where}: the link to {target} leads nowhere")
                elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                    problems.append(f"{where}: {file_part or 'this file'} has no heading #{anchor}")
    return problems


def check_environment_table(source):
    contract = open(os.path.join(source, "common/include/accel_common/contract.h")).read()
    defined = set(VARIABLE.findall(contract))
    table_path = os.path.join(source, "docs/environment.md")
    listed = {m.group(1) for line in open(table_path)
              for m in [TABLE_VARIABLE.match(line)] if m}
    problems = [f"docs/environment.md: {name} is in contract.h but not in the table"
                for name in sorted(defined - listed)]
    problems += [f"docs/environment.md: {name} is in the table but not in contract.h"
                 for name in sorted(listed - defined)]
    return problems, len(defined)


def cmake_project(work, source, programs, contexts):
    """One CMake project: each program and each filled-in context an executable."""
    lines = ["cmake_minimum_required(VERSION 3.18)", "project(accel_docs CXX)",
             "set(CMAKE_CXX_STANDARD 17)", "find_package(accel REQUIRED)"]
    targets = []
    for name, text in programs + contexts:
        with open(os.path.join(work, name + ".cpp"), "w") as f:
            f.write(text)
        lines.append(f"add_executable({name} {name}.cpp)")
        lines.append(f"target_link_libraries({name} PRIVATE accel::accel)")
        lines.append(f'target_include_directories({name} PRIVATE "{source}")')
        targets.append(name)
    # One precompiled LibTorch for all of them: a cold build then costs one parse of its headers.
    lines.append(f"target_precompile_headers({targets[0]} PRIVATE <torch/torch.h> <accel/accel.h>)")
    for name in targets[1:]:
        lines.append(f"target_precompile_headers({name} REUSE_FROM {targets[0]})")
    with open(os.path.join(work, "CMakeLists.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def context_units(contexts):
    """The blocks of one context in one translation unit (a compile of LibTorch code costs seconds,
    and these are built, not run): the context's includes once, then each filled-in copy in a
    namespace of its own, its main() renamed."""
    units = {}
    for name, text, _ in contexts:
        units.setdefault(name.rsplit("_", 1)[0], []).append(text)
    result = []
    for context, texts in sorted(units.items()):
        includes, parts = [], []
        for i, text in enumerate(texts):
            lines = text.split("\n")
            includes += [line for line in lines
                         if line.startswith("#include") and line not in includes]
            # The includes blanked, not removed: a line of the context keeps its number.
            body = "\n".join("" if line.startswith("#include") else line for line in lines)
            if not re.search(r"^int main\(\)", body, re.M):
                raise SystemExit(f"test/docs/contexts/{context}.cpp: no `int main()` to rename")
            body = re.sub(r"^int main\(\)", "int run()", body, count=1, flags=re.M)
            parts.append(f'namespace block_{i} {{\n#line 1 "test/docs/contexts/{context}.cpp"\n'
                         f"{body}\n}}  // namespace block_{i}\n")
        result.append((context, "\n".join(includes) + "\n\n" + "\n".join(parts) +
                       "\nint main() { return 0; }\n"))
    return result


def run(command, **kwargs):
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          **kwargs)


def user_program(sandbox, source, torch_root, prefix):
    """What the migration blocks work on: a single-GPU program in src/, and the compile commands
    a CMake build of it would export into build/ (for `accel-migrate -p build`)."""
    os.makedirs(os.path.join(sandbox, "src"))
    shutil.copy(os.path.join(source, "examples/classifier/train.cpp"),
                os.path.join(sandbox, "src/train.cpp"))
    includes = [os.path.join(torch_root, "include"),
                os.path.join(torch_root, "include/torch/csrc/api/include")]
    flags = " ".join(["-std=c++17"] + [f"-isystem {d}" for d in includes] +
                     [f"-I{os.path.join(prefix, 'include')}"])
    os.makedirs(os.path.join(sandbox, "build"))
    with open(os.path.join(sandbox, "build/compile_commands.json"), "w") as out:
        json.dump([{"directory": sandbox, "file": "src/train.cpp",
                    "command": f"c++ {flags} -c src/train.cpp -o build/train.o"}], out, indent=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True, help="the build folder to install from")
    parser.add_argument("--prefix-path", default="", help="where CMake finds LibTorch")
    parser.add_argument("--work", help="kept afterwards; default: a temporary folder, removed "
                        "however the check ends (700 MB: the install, the programs, a preamble "
                        "cache)")
    args = parser.parse_args()
    source = os.path.abspath(args.source)
    if args.work:
        os.makedirs(args.work, exist_ok=True)
        return check(args, source, os.path.abspath(args.work))
    with tempfile.TemporaryDirectory(prefix="accel_docs_") as work:
        return check(args, source, work)


def check(args, source, work):
    paths = documents(source)

    problems = check_links(paths, source)
    table_problems, variables = check_environment_table(source)
    problems += table_problems
    print(f"docs: {len(paths)} files; links checked; {variables} ACCEL_* variables in the table")

    programs, contexts, shell = [], [], []
    for path in paths:
        for block in read_blocks(path, source):
            if block.language in ("cpp", "c++"):
                if not block.marker or block.marker[0] != "cpp":
                    problems.append(f"{block.where()}: a C++ block without <!-- cpp: program NAME"
                                    " --> or <!-- cpp: in CONTEXT -->")
                    continue
                kind, _, name = block.marker[1].partition(" ")
                if kind == "program" and name:
                    programs.append((name, block.text, block))
                elif kind == "in" and name:
                    template = os.path.join(source, "test/docs/contexts", name + ".cpp")
                    if not os.path.exists(template):
                        problems.append(f"{block.where()}: no context test/docs/contexts/{name}.cpp")
                        continue
                    text = open(template).read()
                    body = "\n".join("  " + line for line in block.text.rstrip().split("\n"))
                    text = text.replace("  // @snippet", f'#line {block.line + 1} "{block.path}"\n'
                                        + body)
                    contexts.append((f"{name}_{len(contexts)}", text, block))
                else:
                    problems.append(f"{block.where()}: unreadable marker '{block.marker[1]}'")
            elif block.language in ("sh", "bash", "shell"):
                if not block.marker or block.marker[0] != "sh" or not (
                        block.marker[1] == "run" or block.marker[1].startswith("not run:")):
                    problems.append(f"{block.where()}: a shell block without <!-- sh: run --> or"
                                    " <!-- sh: not run: WHY -->")
                elif block.marker[1] == "run":
                    shell.append(block)

    if problems:
        print("\n".join(problems))
        print(f"docs: {len(problems)} problem(s) before building anything")
        return 1

    # The installed package, as a user has it.
    prefix = os.path.join(work, "prefix")
    result = run(["cmake", "--install", args.build, "--prefix", prefix])
    if result.returncode != 0:
        print(result.stdout)
        return 1
    project = os.path.join(work, "project")
    shutil.rmtree(project, ignore_errors=True)
    os.makedirs(project)
    cmake_project(project, source, [(n, t) for n, t, _ in programs], context_units(contexts))
    launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
    configure = run(["cmake", "-S", project, "-B", os.path.join(project, "build"), "-G", "Ninja",
                     "-DCMAKE_BUILD_TYPE=Release",
                     f"-DCMAKE_PREFIX_PATH={prefix};{args.prefix_path}", *launcher])
    build = configure if configure.returncode else run(
        ["cmake", "--build", os.path.join(project, "build")],
        env=dict(os.environ, CCACHE_BASEDIR=work, CCACHE_NOHASHDIR="1"))
    if build.returncode != 0:
        print(build.stdout[-20000:])
        print("docs: the C++ above does not build")
        return 1
    for name, _, block in programs:
        print(f"docs: built {block.where()} as the program {name}")
    for name, _, block in contexts:
        print(f"docs: built {block.where()} inside test/docs/contexts/{name.rsplit('_', 1)[0]}.cpp")

    # The shell blocks, where a user runs them: beside the programs they build.
    sandbox = os.path.join(work, "run")
    shutil.rmtree(sandbox, ignore_errors=True)
    os.makedirs(sandbox)
    for name, _, _ in programs:
        shutil.copy(os.path.join(project, "build", name), sandbox)
    user_program(sandbox, source, args.prefix_path, prefix)
    env = dict(os.environ, PATH=os.path.join(prefix, "bin") + os.pathsep + os.environ["PATH"],
               ACCEL_HOME=os.path.join(work, "home"),
               # accel-migrate's preamble cache: the sandbox's own, gone with it.
               XDG_CACHE_HOME=os.path.join(work, "cache"),
               CMAKE_PREFIX_PATH=os.pathsep.join(p for p in (prefix, args.prefix_path) if p))
    failed = 0
    for block in shell:
        result = run(["bash", "-e", "-c", block.text], cwd=sandbox, env=env, timeout=600)
        if result.returncode != 0:
            failed += 1
            print(result.stdout[-10000:])
            print(f"docs: {block.where()}: the shell block failed (exit {result.returncode})")
        else:
            print(f"docs: ran {block.where()}:")
            for line in block.text.strip().split("\n"):
                print(f"  $ {line}")
    if failed:
        return 1
    print(f"docs: {len(programs) + len(contexts)} C++ blocks built, {len(shell)} shell blocks run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
