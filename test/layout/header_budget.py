#!/usr/bin/env python3
"""The Accelerator's public header stays the API and its source stays a dispatcher.

accelerator.h is parsed by every file of every program on libaccel: at most 500 lines, and it
does not pull in the loaders' templates (accel/data_loader.h, accel/stream_loader.h), directly
or through another accel/ header; it declares what it only names. core/accelerator.cpp hands
each job to a part of the Accelerator: at most 450 lines.

Usage: header_budget.py <project root>      checks the tree
       header_budget.py --self-test          shows a planted breach of each rule refused
"""
import os
import re
import sys
import tempfile

from layout_check import report, run_self_test

HEADER = "runtime/include/accel/accelerator.h"
SOURCE = "runtime/src/core/accelerator.cpp"
BUDGETS = {HEADER: 500, SOURCE: 450}
LOADER_HEADERS = {"accel/data_loader.h", "accel/stream_loader.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s*<(accel/[^>]+)>', re.M)


def accel_includes(include_dir, header, seen=None):
    """Every accel/ header `header` includes, directly or through others."""
    seen = set() if seen is None else seen
    path = os.path.join(include_dir, header)
    if not os.path.exists(path):
        return seen
    with open(path, encoding="utf-8") as f:
        for name in INCLUDE.findall(f.read()):
            if name not in seen:
                seen.add(name)
                accel_includes(include_dir, name, seen)
    return seen


def problems(root):
    found = []
    for relative, budget in BUDGETS.items():
        with open(os.path.join(root, relative), encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > budget:
            found.append(f"{relative}: {lines} lines, over its budget of {budget}")
    include_dir = os.path.join(root, "runtime/include")
    reached = accel_includes(include_dir, "accel/accelerator.h")
    for loader in sorted(LOADER_HEADERS & reached):
        found.append(f"{HEADER} includes {loader} (directly or through another accel/ header); "
                     "declare what it only names (accel/detail/loader_preparation.h)")
    return found


def self_test():
    def tree(header_lines, source_lines, extra_include=""):
        root = tempfile.mkdtemp()
        os.makedirs(os.path.join(root, "runtime/include/accel/detail"))
        os.makedirs(os.path.join(root, "runtime/src/core"))
        with open(os.path.join(root, HEADER), "w") as f:
            f.write("#include <accel/detail/x.h>\n" + "//\n" * (header_lines - 1))
        with open(os.path.join(root, "runtime/include/accel/detail/x.h"), "w") as f:
            f.write(extra_include)
        with open(os.path.join(root, SOURCE), "w") as f:
            f.write("//\n" * source_lines)
        return root

    cases = [
        ("within budget", tree(500, 450), 0),
        ("a long header", tree(501, 10), 1),
        ("a long source", tree(10, 451), 1),
        ("a loader reached through another header",
         tree(10, 10, "#include <accel/stream_loader.h>\n"), 1),
    ]
    return run_self_test(cases, problems)


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    return report(problems(sys.argv[1]), "header budget")


if __name__ == "__main__":
    sys.exit(main())
