#!/usr/bin/env python3
"""layout.includes_catches: check_includes.py passes on runtime/ as it is and fails, naming the
problem, on a copy with one fault planted: a folder that includes another's private header
without the rule, a public header of a folder it may not use, rules that form a cycle, a
definition in another folder's namespace, and a public header nobody owns.

    check_includes_test.py RUNTIME_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_includes.py")


def run_check(runtime):
    result = subprocess.run([sys.executable, CHECK, os.path.join(runtime, "src")],
                            capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def append(path, text):
    with open(path, "a") as out:
        out.write(text)


def add_to_may_include(runtime, folder, other):
    readme = os.path.join(runtime, "src", folder, "README.md")
    text = open(readme).read()
    text = re.sub(r"^May include:(.*)$", lambda m: f"May include:{m.group(1)} {other}", text,
                  flags=re.M)
    open(readme, "w").write(text)


PLANTS = [
    ("a private header of core, from tracking",
     lambda r: append(os.path.join(r, "src/tracking/tracking.cpp"),
                      '\n#include "core/accelerator_impl.h"\n'),
     "tracking/tracking.cpp: includes core/accelerator_impl.h, but tracking/ may include only"),
    ("core's public options header, from distributed",
     lambda r: append(os.path.join(r, "src/distributed/collectives.cpp"),
                      "\n#include <accel/options.h>\n"),
     "distributed/collectives.cpp: includes <accel/options.h>, core/'s public header"),
    ("a rule back from tracking to core",
     lambda r: add_to_may_include(r, "tracking", "core"),
     "the READMEs' May include rules form a cycle: core -> tracking -> core"),
    ("a definition in another folder's namespace",
     lambda r: append(os.path.join(r, "src/tracking/tracking.cpp"),
                      "\nnamespace accel {\nnamespace core {\nint planted() { return 1; }\n"
                      "}  // namespace core\n}  // namespace accel\n"),
     "tracking/tracking.cpp: opens accel::core, core/'s namespace"),
    ("a public header without an owner",
     lambda r: append(os.path.join(r, "include/accel/unowned.h"), "#pragma once\n"),
     "accel/unowned.h has no owner"),
]


def main():
    runtime = os.path.abspath(sys.argv[1])
    status, output = run_check(runtime)
    if status != 0:
        print(output)
        sys.exit("check_includes.py fails on runtime/ as it is")
    failed = False
    for what, plant, expected in PLANTS:
        with tempfile.TemporaryDirectory() as work:
            copy = os.path.join(work, "runtime")
            for part in ("src", "include"):
                shutil.copytree(os.path.join(runtime, part), os.path.join(copy, part))
            plant(copy)
            status, output = run_check(copy)
            if status == 0 or expected not in output:
                print(f"planted {what}: expected a failure saying '{expected}', got "
                      f"exit {status}:\n{output}")
                failed = True
            else:
                print(f"planted {what}: refused ({expected})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
