#!/usr/bin/env python3
"""accel_common/accelerator_methods.h lists the Accelerator's public methods, no more, no fewer.

The table is read by the runtime (its call labels in the flight record) and by accel-migrate
(which calls communicate, combine, or name this process). It fails here when:
- a public method of the Accelerator, or of a group of methods it inherits, has no entry (a new
  collective would go unseen by accel-migrate's divergence check);
- an entry is not a public method;
- a call label in runtime/src/core names no entry: a label that reads as a method name
  (an identifier) must be written ACCEL_METHOD_LABEL("name") and name an entry.

Usage: accelerator_methods.py <project root>     checks the tree
       accelerator_methods.py --self-test <root>  shows a planted breach of each rule refused
"""
import glob
import os
import re
import shutil
import sys
import tempfile

from layout_check import report, run_self_test

TABLE = "common/include/accel_common/accelerator_methods.h"
# The Accelerator and the groups of methods it inherits (accel::detail::X<Accelerator>).
CLASSES = [
    ("runtime/include/accel/accelerator.h", "Accelerator"),
    ("runtime/include/accel/detail/process_control.h", "ProcessControl"),
    ("runtime/include/accel/detail/collective_methods.h", "CollectiveMethods"),
    ("runtime/include/accel/detail/loader_preparation.h", "DataLoaderPreparation"),
    ("runtime/include/accel/detail/optimizer_preparation.h", "OptimizerPreparation"),
    ("runtime/include/accel/detail/checkpoint_methods.h", "CheckpointMethods"),
]
NOT_NAMES = {"decltype", "sizeof", "static_assert", "return", "if", "for", "while", "operator",
             "noexcept", "deprecated", "format", "__attribute__", "explicit", "alignas"}


def class_body(text, name):
    match = re.search(r"\bclass\s+(?:\[\[\w+\]\]\s+)?%s\b[^;{]*\{" % name, text)
    if not match:
        return None
    depth, start = 0, match.end() - 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    return None


def top_level(body):
    """The class body without the bodies of its members (what sits at brace depth 0)."""
    out, depth = [], 0
    for c in body:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


def public_methods(text, name):
    body = class_body(text, name)
    if body is None:
        return None
    access = "private"
    names = set()
    for line in top_level(body).split("\n"):
        stripped = line.strip()
        if re.match(r"public\s*:", stripped):
            access = "public"
            continue
        if re.match(r"(private|protected)\s*:", stripped):
            access = "private"
            continue
        if access != "public" or stripped.startswith("//") or stripped.startswith("using "):
            continue
        declaration = stripped.split("->")[0]
        for match in re.finditer(r"\b([a-z_][a-z0-9_]*)\s*\(", declaration):
            if match.group(1) not in NOT_NAMES:
                names.add(match.group(1))
                break
    return names


def table_entries(root):
    with open(os.path.join(root, TABLE), encoding="utf-8") as f:
        return re.findall(r'\{"([a-z_0-9]+)",\s*MethodRole::', f.read())


def problems(root):
    found = []
    methods = set()
    for relative, name in CLASSES:
        with open(os.path.join(root, relative), encoding="utf-8") as f:
            names = public_methods(f.read(), name)
        if names is None:
            found.append(f"{relative}: class {name} not found")
            continue
        methods |= names
    entries = table_entries(root)
    for duplicate in sorted({e for e in entries if entries.count(e) > 1}):
        found.append(f"{TABLE}: {duplicate} is listed twice")
    for missing in sorted(methods - set(entries)):
        found.append(f"public Accelerator method {missing}() has no entry in {TABLE}: give it its "
                     "role (local, identity, collective, combining)")
    for extra in sorted(set(entries) - methods):
        found.append(f"{TABLE}: {extra} is not a public Accelerator method")
    for path in sorted(glob.glob(os.path.join(root, "runtime/src/core/*.cpp"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        relative = os.path.relpath(path, root)
        for label in re.findall(r'ACCEL_METHOD_LABEL\("([^"]*)"\)', text):
            if label not in entries:
                found.append(f"{relative}: the call label {label} names no entry in {TABLE}")
        for label in re.findall(r'CollectiveLabel\s+\w+\s*[({]\s*"([^"]*)"', text):
            if re.fullmatch(r"[a-z_][a-z0-9_]*", label):
                found.append(f'{relative}: the call label {label} is written without '
                             f'ACCEL_METHOD_LABEL("{label}"), so no entry is checked')
    return found


def self_test(root):
    def planted(edit):
        copy = tempfile.mkdtemp()
        for relative, _ in CLASSES + [(TABLE, None)]:
            os.makedirs(os.path.dirname(os.path.join(copy, relative)), exist_ok=True)
            shutil.copy(os.path.join(root, relative), os.path.join(copy, relative))
        os.makedirs(os.path.join(copy, "runtime/src/core"))
        edit(copy)
        return copy

    def append_to(relative, before, text):
        def edit(copy):
            path = os.path.join(copy, relative)
            with open(path, encoding="utf-8") as f:
                content = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(content.replace(before, text + before, 1))
        return edit

    def core_source(text):
        def edit(copy):
            with open(os.path.join(copy, "runtime/src/core/x.cpp"), "w") as f:
                f.write(text)
        return edit

    cases = [
        ("the tree as it is", planted(lambda copy: None), 0),
        ("a new collective not in the table",
         planted(append_to(CLASSES[0][0], " private:\n  struct Impl;",
                           "  void all_to_all(const torch::Tensor& t);\n\n")), 1),
        ("an entry that is not a public method",
         planted(append_to(TABLE, "    // prepare\n",
                           '    {"prepare_optimizer", MethodRole::collective},\n')), 1),
        ("a call label naming no entry",
         planted(core_source('void f() { ACCEL_METHOD_LABEL("reduce_number"); }\n')), 1),
        ("a call label written around the table",
         planted(core_source('void f() { util::CollectiveLabel collective_label("save"); }\n')),
         1),
    ]
    return run_self_test(cases, problems)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--self-test":
        return self_test(sys.argv[2])
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    return report(problems(sys.argv[1]), "accelerator methods")


if __name__ == "__main__":
    sys.exit(main())
